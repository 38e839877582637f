# The two commands of the README: `make demo` (the main job, on the embedded SQLite
# default) and `make test` (the suite). Each sets up its own virtualenv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test soak bench lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.zett-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[zett,postgres,mysql]'
	touch $@

$(VENV)/.docs-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.zett-installed

demo: $(VENV)/.zett-installed
	$(BIN)/chatledger demo $(ARGS)

# With a Docker engine, the server image is built first as CI builds it (idempotent), so
# the container targets run too; without one they are left out, in one line at the end.
test: $(VENV)/.dev-installed
	@if docker info >/dev/null 2>&1; then docker/build-images.sh; else export CHATLEDGER_TEST_CONTAINERS=0; fi; \
		$(BIN)/python -m pytest $(ARGS)

# The history checker (tests/test_history.py) with new random histories and a long
# budget per target: SOAK_EXAMPLES histories of SOAK_STEPS steps each.
SOAK_EXAMPLES ?= 300
SOAK_STEPS ?= 50
soak: $(VENV)/.dev-installed
	CHATLEDGER_HISTORY_RANDOM=1 CHATLEDGER_HISTORY_EXAMPLES=$(SOAK_EXAMPLES) \
		CHATLEDGER_HISTORY_STEPS=$(SOAK_STEPS) $(BIN)/python -m pytest tests/test_history.py $(ARGS)

bench: $(VENV)/.dev-installed
	$(BIN)/chatledger bench $(ARGS)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests migrations bench docs/conf.py
	$(BIN)/ruff format --check src tests migrations bench docs/conf.py
	$(BIN)/mypy

# The documentation site from docs/, into build/docs; warnings (a broken link or
# reference, a docstring Sphinx cannot read) fail it. -E reads every page and docstring
# again, so no warning hides in a cached page. Nothing is fetched while building, and
# the pages load nothing from elsewhere (no fonts, scripts or styles by URL).
docs: $(VENV)/.docs-installed
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs build/docs $(ARGS)
	@! grep -rlE '<(script|link|img)[^>]+(src|href)="(https?:)?//' build/docs --include='*.html' \
		|| { echo "make docs: the pages above load something by URL; the site must work offline" >&2; exit 1; }

clean:
	rm -rf $(VENV)
