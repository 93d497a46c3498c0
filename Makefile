# Two commands do all set-up on a fresh machine:
#   make demo   run `threadlog demo` on the embedded store (~/.threadlog, or HOME_DIR=...)
#   make test   lint, type-check and run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint typecheck pytest release-check dist bench crash-loop clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,server,otel,postgres,langgraph,openai-agents,adk,bench,zstd]'
	$(PYTHON) scripts/install_chromium.py
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/threadlog demo $(if $(HOME_DIR),--home $(HOME_DIR),)

test: check pytest

check: lint typecheck

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts

typecheck: $(STAMP)
	$(BIN)/mypy

# one worker process per core (pytest-xdist); a single test file: .venv/bin/pytest -q FILE
pytest: $(STAMP)
	$(BIN)/pytest -q -n auto

# the wheel, installed into a fresh venv, running the README's quickstarts (tests/test_release.py)
release-check: $(STAMP)
	$(BIN)/pytest -q tests/test_release.py

dist: $(STAMP)
	$(BIN)/python -m pip wheel . --no-deps --wheel-dir dist

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_log.py

crash-loop: $(STAMP)
	$(BIN)/python scripts/crash_loop.py --trials 1000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist
