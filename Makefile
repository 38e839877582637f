# The two commands of the README: `make demo` (the main job, on the embedded SQLite
# default) and `make test` (the suite). Each sets up its own virtualenv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.zett-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[zett,postgres,mysql]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.zett-installed

demo: $(VENV)/.zett-installed
	$(BIN)/chatledger demo $(ARGS)

test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest $(ARGS)

bench: $(VENV)/.dev-installed
	$(BIN)/chatledger bench $(ARGS)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests migrations bench
	$(BIN)/ruff format --check src tests migrations bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV)
