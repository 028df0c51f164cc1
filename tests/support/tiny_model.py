"""A tiny random-weight Llama that a real vLLM engine can serve on CPU.

Nothing can be downloaded on the test machines, so the model is built at
test time: a byte-level BPE tokenizer trained on a few sentences and a
2-layer Llama (hidden 128, 2 heads of 64, fp32) with random weights,
about 1.6 MB on disk.  Its output is gibberish; it exists so that the
engine, its scheduler, its queues and its metrics are real.

The build runs in the vLLM virtualenv's python (the project virtualenv
has neither transformers nor tokenizers), as a script on the command line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Written last; its presence means the build finished.
MARKER_NAME = "infertop-tiny-model.json"
#: Bump when the recipe below changes, so old builds are not reused.
RECIPE_VERSION = 1

MODEL_PARAMS: dict = {
    "vocab_target": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,  # the CPU attention kernel rejects head_dim 16
    "max_position_embeddings": 2048,
    "seed": 1234,
}

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "infertop is a terminal control plane for LLM inference.",
    "vLLM schedules requests in batches and keeps a paged KV cache.",
    "Prometheus scrapes metrics from every engine every few seconds.",
    "How many requests are running, and how many are waiting in the queue?",
    "GPU memory, tokens per second, time to first token and latency.",
    "A small model with random weights writes nonsense, quickly.",
    "Hello! Hi there. Goodbye, and thanks for all the fish.",
    "def main(argv=None):\n    return 0  # 1234567890",
    "Autoscaling adds replicas when the queue grows and removes them later.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.",
    "User: what is the weather today? Assistant: it is sunny and warm.",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Runs in the vLLM virtualenv: argv[1] = output dir, argv[2] = JSON spec.
_BUILD_SCRIPT = r"""
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
spec = json.loads(sys.argv[2])
p = spec["params"]

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

specials = ["<s>", "</s>", "<pad>"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=p["vocab_target"],
    special_tokens=specials,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tok.train_from_iterator(spec["corpus"], trainer=trainer)
bos_id, eos_id, pad_id = (tok.token_to_id(t) for t in specials)
tok.post_processor = processors.TemplateProcessing(
    single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    bos_token="<s>",
    eos_token="</s>",
    pad_token="<pad>",
    model_max_length=p["max_position_embeddings"],
)
fast.chat_template = spec["chat_template"]
fast.save_pretrained(out)
vocab = len(fast)

torch.manual_seed(p["seed"])
config = LlamaConfig(
    vocab_size=vocab,
    hidden_size=p["hidden_size"],
    intermediate_size=p["intermediate_size"],
    num_hidden_layers=p["num_hidden_layers"],
    num_attention_heads=p["num_attention_heads"],
    num_key_value_heads=p["num_key_value_heads"],
    head_dim=p["head_dim"],
    max_position_embeddings=p["max_position_embeddings"],
    bos_token_id=bos_id,
    eos_token_id=eos_id,
    pad_token_id=pad_id,
    tie_word_embeddings=False,
    dtype="float32",
)
model = LlamaForCausalLM(config).to(torch.float32).eval()
model.save_pretrained(out, safe_serialization=True)
print(json.dumps({"vocab_size": vocab, "bos": bos_id, "eos": eos_id,
                  "parameters": sum(t.numel() for t in model.parameters())}))
"""


def _spec(served_name: str) -> dict:
    return {
        "recipe": RECIPE_VERSION,
        "served_name": served_name,
        "params": MODEL_PARAMS,
        "corpus": CORPUS,
        "chat_template": CHAT_TEMPLATE,
    }


def is_built(dst: Path, served_name: str = "tiny") -> bool:
    """Whether *dst* holds a finished build of this recipe."""
    try:
        meta = json.loads((Path(dst) / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    return (
        meta.get("recipe") == RECIPE_VERSION
        and meta.get("params") == MODEL_PARAMS
        and (Path(dst) / "config.json").is_file()
        and (Path(dst) / "model.safetensors").is_file()
        and (Path(dst) / "tokenizer.json").is_file()
    )


def build_tiny_model(
    dst: Path,
    served_name: str = "tiny",
    *,
    python: Path | str | None = None,
    timeout: float = 600.0,
) -> Path:
    """Build the tiny model into *dst* (skipped if already built); return *dst*.

    *python* is the vLLM virtualenv's interpreter; by default the one
    ``infertop.control.vllm_env.ensure_venv()`` gives.  *served_name* is
    recorded in the model's marker file (the engine serves the model under
    whatever ``--served-model-name`` it is given).
    """
    dst = Path(dst).absolute()
    if is_built(dst, served_name):
        return dst
    if python is None:
        from infertop.control.vllm_env import ensure_venv

        python = ensure_venv()

    if dst.exists() and any(dst.iterdir()) and not (
        (dst / MARKER_NAME).exists() or (dst / "config.json").exists()
    ):
        raise RuntimeError(f"{dst} is not empty and holds no model; not touching it")
    spec = _spec(served_name)
    tmp = dst.parent / f".{dst.name}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(key, None)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    try:
        proc = subprocess.run(
            [str(python), "-c", _BUILD_SCRIPT, str(tmp), json.dumps(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"building the tiny model failed (exit {proc.returncode}):\n"
                + (proc.stdout + proc.stderr)[-4000:]
            )
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        meta = {k: spec[k] for k in ("recipe", "served_name", "params")}
        meta.update(info)
        (tmp / MARKER_NAME).write_text(json.dumps(meta, indent=2) + "\n")
        if dst.exists():  # an unfinished or outdated build
            shutil.rmtree(dst)
        tmp.rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


if __name__ == "__main__":  # python tests/support/tiny_model.py DIR
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-model")
    print(build_tiny_model(target))
