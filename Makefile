# CodeLab Agent Runtime. Two commands do all the setup on a fresh machine:
#   make run    start the whole mesh on embedded defaults
#   make test   install and run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard protos/codelab/v1/*.proto)
STUBS  := $(patsubst protos/%.proto,%_pb2.py,$(PROTOS))

.PHONY: install proto proto-check run test chromium lint format bench soak chaos fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Stubs are committed; they are regenerated only when a .proto is newer.
$(STUBS) &: $(PROTOS) | $(STAMP)
	$(BIN)/python scripts/protogen.py

proto: $(STAMP)
	$(BIN)/python scripts/protogen.py

proto-check: $(STAMP)
	$(BIN)/python scripts/protogen.py --check

run: $(STAMP) $(STUBS)
	$(BIN)/python -m services.supervisor

test: $(STAMP) $(STUBS) chromium
	$(BIN)/python -m pytest -q

# The browser tests' Chromium (the distribution's package), installed when missing.
chromium:
	@scripts/ensure_chromium.sh

# Benchmarks print numbers and never fail on a threshold (bench/LATEST.md gets the table).
bench: $(STAMP) $(STUBS)
	$(BIN)/python -m bench

# Bounded: stops by itself after MINUTES (default 3).
soak: $(STAMP) $(STUBS)
	$(BIN)/python -m bench.soak --minutes $(or $(MINUTES),3)

# Kills random mesh processes KILLS times (default 40) while sessions stream; exits 1 when
# a check fails. Bounded (15 minutes at most).
chaos: $(STAMP) $(STUBS)
	$(BIN)/python -m bench.chaos --kills $(or $(KILLS),40)

# The fuzz suite (part of make test with few examples) at length: random seeds,
# FUZZ_EXAMPLES (2000) examples per test, an hour at most per test.
fuzz: $(STAMP) $(STUBS)
	FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),2000) FUZZ_RANDOM=1 $(BIN)/python -m pytest -q --timeout 3600 tests/fuzz

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy services clients scripts tests bench

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
