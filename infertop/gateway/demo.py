"""``--demo``'s gateway: one child process running the gateway in front of the simulated
engines and the load generator sending mixed classes through it.

:func:`start_demo_gateway` starts it and returns its URLs once it listens; the child
prints ``gateway URL admin URL`` and stops when its parent dies. Caps are kept small
(``DEMO_CAP`` per engine) so the classes queue in the gateway and a weight change
visibly moves the shares; the load is a few dozen closed-loop clients (light on CPU),
and a demo of more than ``DEMO_ENGINES_MAX`` engines puts only the first ones behind it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass

TOKEN_ENV = "INFERTOP_DEMO_GATEWAY_TOKEN"
DEMO_CAP = 3
DEMO_ENGINES_MAX = 6  # a bigger demo fleet: the gateway fronts the first six (its load stays ~60 clients)


@dataclass
class DemoGateway:
    proc: subprocess.Popen
    url: str
    admin_url: str
    token_env: str = TOKEN_ENV

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_demo_gateway(engine_urls: list[str], *, timeout_s: float = 30.0) -> DemoGateway:
    """Start the child; sets ``TOKEN_ENV`` in this process so the console can use the admin API.
    Raises RuntimeError when it does not come up."""
    token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    os.environ[TOKEN_ENV] = token
    cmd = [sys.executable, "-m", "infertop.gateway.demo"]
    for url in engine_urls[:DEMO_ENGINES_MAX]:
        cmd += ["--engine", url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            text=True, env={**os.environ, TOKEN_ENV: token}, start_new_session=True)
    import selectors

    out = proc.stdout
    if out is None:  # never with stdout=PIPE
        raise RuntimeError("the demo gateway has no output pipe")
    sel = selectors.DefaultSelector()
    sel.register(out, selectors.EVENT_READ)
    ready = sel.select(timeout_s)
    sel.close()
    line = out.readline().split() if ready else []
    if len(line) < 4 or line[0] != "gateway":
        proc.kill()
        proc.wait(timeout=5)
        raise RuntimeError("the demo gateway did not start" + ("" if ready else f" within {timeout_s:.0f} s"))
    return DemoGateway(proc, line[1], line[3])


async def _run(engine_urls: list[str]) -> None:
    from .config import GatewayConfig, GatewayEngine
    from .loadgen import LoadGen
    from .runner import GatewayRunner, resolve_engines

    gw = GatewayConfig(listen="127.0.0.1:0", admin_listen="127.0.0.1:0", admin_token_env=TOKEN_ENV)
    gw.engines = [GatewayEngine(url=u, name=f"vllm-{i}", cap=DEMO_CAP, priority_scheduling=True)
                  for i, u in enumerate(engine_urls)]
    runner = await GatewayRunner(gw, resolve_engines(gw), os.environ.get(TOKEN_ENV)).start()
    print(f"gateway {runner.url} admin {runner.admin_url}", flush=True)
    n = len(engine_urls) * DEMO_CAP  # clients 3.5 × the slots: batch and background stay backlogged
    clients = {"realtime": max(2, n // 2), "batch": 2 * n, "background": n}
    load = asyncio.create_task(LoadGen(runner.url, clients, think_s=0.1).run())
    parent = os.getppid()
    try:
        while os.getppid() == parent and not load.done():
            await asyncio.sleep(0.5)
    finally:
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        await runner.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infertop.gateway.demo")
    p.add_argument("--engine", action="append", default=[], required=True)
    args = p.parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on ^C: the finally blocks run
    try:
        asyncio.run(_run(args.engine))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
