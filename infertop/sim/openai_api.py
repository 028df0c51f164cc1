"""OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions`` of the simulated engine.

Requests go into the engine model and are answered as the model produces
tokens: plain JSON once the request finishes, or, with ``"stream": true``,
server-sent events (chunked) as the driver advances the virtual clock.
"""

from __future__ import annotations

import hashlib
import json
import queue
import time
from typing import TYPE_CHECKING

from .http_base import _Handler
from .requests import SimRequest

if TYPE_CHECKING:
    from .server import SimEngine

__all__ = ["approx_tokens"]

_WORDS = ("the", "model", "token", "cache", "batch", "queue", "latency", "engine", "GPU", "prefill", "decode",
          "request", "stream", "block", "kernel", "memory", "prompt", "answer", "fast", "and", "of", "to", "a",
          "is", "in", "that", "with", "for", "it", "as", "on", "by")


def approx_tokens(text: str) -> int:
    """Token count estimate: ~4 characters per token, at least 1."""
    return max(1, (len(text) + 3) // 4)


def _token_text(seed: int, i: int) -> str:
    return " " + _WORDS[(seed + i * 7919) % len(_WORDS)]


class _OpenAIHandler(_Handler):
    """The completions endpoints; :class:`infertop.sim.server._EngineHandler` routes to them."""

    def _error(self, status: int, message: str, typ: str = "BadRequestError", param: str | None = None) -> tuple:
        return status, self._send_json(status, {"error": {"message": message, "type": typ, "param": param,
                                                          "code": status}})

    def _completion(self, sim: SimEngine, raw: bytes, chat: bool) -> tuple[int, int]:
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            return self._error(400, f"Invalid JSON body: {e}")
        core = sim.core
        cfg = core.config
        model = body.get("model")
        if model is not None and model != cfg.model_name:
            return self._error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        try:
            if chat:
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    return self._error(400, "messages must be a non-empty list", param="messages")
                texts = [_content_text(m.get("content")) if isinstance(m, dict) else "" for m in msgs]
                prompt_tokens = sum(approx_tokens(t) + 4 for t in texts) + 3
                system = [t for m, t in zip(msgs, texts) if isinstance(m, dict) and m.get("role") == "system"]
                prefix_text = system[0] if system else (texts[0] if len(texts) > 1 else "")
                prefix_tokens = approx_tokens(prefix_text) + 4 if prefix_text else 0
                key_text = "\x00".join(texts)
            else:
                prompt = body.get("prompt", "")
                if isinstance(prompt, list):
                    if prompt and all(isinstance(x, int) for x in prompt):
                        prompt_tokens = len(prompt)
                        key_text = ",".join(map(str, prompt))
                    elif len(prompt) == 1 and isinstance(prompt[0], str):
                        prompt_tokens = approx_tokens(prompt[0])
                        key_text = prompt[0]
                    else:
                        return self._error(400, "the simulator accepts one prompt per request", param="prompt")
                elif isinstance(prompt, str):
                    prompt_tokens = approx_tokens(prompt)
                    key_text = prompt
                else:
                    return self._error(400, "prompt must be a string or a list of token ids", param="prompt")
                prefix_text = key_text
                prefix_tokens = prompt_tokens - 1
            n = int(body.get("n") or 1)
            priority = int(body.get("priority") or 0)
            max_tokens = body.get("max_completion_tokens") if chat else None
            if max_tokens is None:
                max_tokens = body.get("max_tokens")
            stream = bool(body.get("stream"))
            stream_opts = body.get("stream_options") or {}
            include_usage = bool(stream_opts.get("include_usage")) if isinstance(stream_opts, dict) else False
        except (TypeError, ValueError, AttributeError) as e:
            return self._error(400, f"Invalid request: {e}")
        if n != 1:
            return self._error(400, "the simulator supports n=1 only", param="n")
        seed = int.from_bytes(hashlib.blake2b(key_text.encode(), digest_size=4).digest(), "big")
        stop_at = None
        if max_tokens is None:
            if chat:
                max_tokens = cfg.max_model_len - prompt_tokens
                stop_at = 24 + seed % 160
            else:
                max_tokens = 16
        max_tokens = int(max_tokens)
        if max_tokens < 1:
            return self._error(400, "max_tokens must be at least 1", param="max_tokens")
        if prompt_tokens + max_tokens > cfg.max_model_len:
            return self._error(
                400,
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                f"completion). Please reduce the length of the messages or completion.",
                param="max_tokens")
        if priority != 0 and cfg.scheduling_policy != "priority":
            return self._error(400, f"Got priority {priority} != 0, but priority scheduling is not enabled.",
                               param="priority")
        prefix_id = None
        if prefix_tokens >= cfg.block_size:
            prefix_id = "h:" + hashlib.blake2b(prefix_text.encode(), digest_size=8).hexdigest()
        events: queue.SimpleQueue = queue.SimpleQueue()
        req = SimRequest(
            prompt_tokens, max_tokens, stop_at=stop_at, prefix_id=prefix_id, prefix_tokens=prefix_tokens,
            priority=priority,
            on_token=(lambda r, k, t: events.put(k)) if stream else None,
            on_finish=lambda r: events.put(None),
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + hashlib.blake2b(
            f"{req.request_id}:{time.time_ns()}".encode(), digest_size=16).hexdigest()
        created = int(time.time())
        try:
            accepted = sim.submit(req)
        except ValueError as e:
            return self._error(400, str(e))
        if not accepted:
            return self._error(503, "The server is overloaded: the waiting queue is full.", "ServiceUnavailable")
        name = cfg.model_name
        if stream:
            return self._stream(sim, req, events, rid, created, name, chat, seed, include_usage)
        # non-streaming: wait for the end
        if not self._wait_finish(sim, req, events):
            return 0, 0
        if req.finished_reason == "abort":
            self.close_connection = True
            return 0, 0
        out = req.out
        text = "".join(_token_text(seed, i) for i in range(out))
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + out, "completion_tokens": out,
                 "prompt_tokens_details": None}
        if chat:
            payload = {
                "id": rid, "object": "chat.completion", "created": created, "model": name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text.lstrip(), "refusal": None,
                                                     "annotations": None, "audio": None, "function_call": None,
                                                     "tool_calls": [], "reasoning_content": None},
                             "logprobs": None, "finish_reason": req.finished_reason, "stop_reason": None}],
                "service_tier": None, "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            payload = {
                "id": rid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": req.finished_reason,
                             "stop_reason": None, "prompt_logprobs": None}],
                "usage": usage, "kv_transfer_params": None,
            }
        return 200, self._send_json(200, payload)

    def _wait_finish(self, sim: SimEngine, req: SimRequest, events: queue.SimpleQueue) -> bool:
        stopping = sim._listener.stopping
        while True:
            try:
                item = events.get(timeout=0.2)
            except queue.Empty:
                if stopping.is_set() or not sim._listener.listening:
                    sim.abort(req)
                    self.close_connection = True
                    return False
                continue
            if item is None:
                return True

    def _stream(self, sim, req, events, rid, created, name, chat, seed, include_usage) -> tuple[int, int]:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        size = 0
        obj_type = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices, usage=None) -> bytes:
            d = {"id": rid, "object": obj_type, "created": created, "model": name, "choices": choices}
            if usage is not None:
                d["usage"] = usage
            data = b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"
            return b"%x\r\n%s\r\n" % (len(data), data)

        def write(buf: bytes) -> None:
            nonlocal size
            self.wfile.write(buf)
            size += len(buf)

        stopping = sim._listener.stopping
        emitted = 0
        finished = False
        try:
            if chat:
                write(chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}]))
            while not finished:
                try:
                    items = [events.get(timeout=0.2)]
                except queue.Empty:
                    if stopping.is_set() or not sim._listener.listening:
                        sim.abort(req)
                        self.close_connection = True
                        return 200, size
                    continue
                while True:  # drain what is there: one write per batch
                    try:
                        items.append(events.get_nowait())
                    except queue.Empty:
                        break
                if None in items:
                    finished = True
                buf = []
                upto = max([k for k in items if k is not None], default=emitted)
                while emitted < upto:
                    is_last = finished and emitted + 1 >= req.out
                    reason = req.finished_reason if is_last else None
                    txt = _token_text(seed, emitted)
                    if chat:
                        choice = {"index": 0, "delta": {"content": txt}, "logprobs": None, "finish_reason": reason}
                        if is_last:
                            choice["stop_reason"] = None
                    else:
                        choice = {"index": 0, "text": txt, "logprobs": None, "finish_reason": reason,
                                  "stop_reason": None}
                    buf.append(chunk([choice]))
                    emitted += 1
                if finished and req.finished_reason == "abort":
                    if buf:
                        write(b"".join(buf))
                    self.close_connection = True
                    return 200, size
                if buf:
                    write(b"".join(buf))
            out = req.out
            self._record(200, size)
            if include_usage:
                write(chunk([], {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + out,
                                 "completion_tokens": out}))
            write(b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n"))
            write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            sim.abort(req)
            self.close_connection = True
        return 200, size


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
