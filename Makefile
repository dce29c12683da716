# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo test lint-code bench rules-doc clean

# Pinned: constraints.txt holds the exact version of every dependency (pyproject.toml only the
# lower bounds); a change to either file reinstalls.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint-code: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy policies lint webhook audit gpugate
	$(BIN)/lint-imports --no-cache   # the layer contracts of pyproject.toml (also run by make test)

bench: $(STAMP)
	for b in bench/*_bench.py; do $(BIN)/python $$b; done

rules-doc: $(STAMP)
	$(BIN)/gpugate rules --markdown > docs/rules.md

clean:
	rm -rf $(VENV) build *.egg-info
