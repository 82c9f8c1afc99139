# inferload: the two set-up commands are `make demo` and `make test` (see README).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test build system-deps bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[servers,test]'
	touch $(STAMP)

system-deps:
	bash scripts/install-system-deps.sh

build: $(STAMP) system-deps
	$(PY) -m inferload.models.build

demo: build
	$(VENV)/bin/inferload demo

test: build
	$(PY) -m pytest

clean:
	rm -rf $(VENV) results .inferload model_repository/*/1/model.pt model_store/*.mar
