# bert-pipeline: `make setup` installs everything and runs the demo DAG; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup install test lint constraints clean

setup: install
	$(BIN)/bert-pipeline demo

install: $(STAMP)

# torch==2.13.0 first and alone: on these machines it resolves to the local CPU wheel; letting a
# dependency pick torch could pull a multi-GB CUDA build.
$(STAMP): pyproject.toml infra/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c infra/constraints.txt -e '.[test,tf,production]'
	touch $(STAMP)

# Two xdist workers, one test file at a time, long files first (the order is in tests/conftest.py).
test: install
	$(BIN)/python -m pytest -q -ra --durations=15 -n 2 --dist loadfile --no-loadscope-reorder

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

constraints: install
	{ sed -n '1,2p' infra/constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	  | sed 's/^torch==.*/torch==2.13.0/'; } > infra/constraints.txt.new && mv infra/constraints.txt.new infra/constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache
