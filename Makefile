# inferload: the two set-up commands are `make demo` and `make test` (see README).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit integration lint build bench soak clean

# pyproject.toml declares ranges; constraints.txt pins the tested set installed here
$(STAMP): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[servers,test,lint]'
	touch $(STAMP)

build: $(STAMP)
	bash scripts/install-system-deps.sh servers
	$(PY) -m inferload.local.models.build

demo: build
	$(VENV)/bin/inferload demo

# the README's test command (and CI's): linters, then the fast layer, then the real servers
test: lint unit integration

# fast layer: no torch, no servers (under a minute)
unit: $(STAMP)
	$(PY) -m pytest tests/unit

# BentoML's and KServe's own venvs (made on first use, keyed by a hash of their requirements) are kept
# out of the clone, so a fresh clone on the same machine reuses them (tests/integration/test_bentoml_service.py,
# test_kserve_server.py; a CI cache of this folder keyed on bentoml_local.py, kserve_local.py and server_venv.py)
INFERLOAD_VENVS ?= $(HOME)/.cache/inferload/venvs
export INFERLOAD_VENVS

integration: build
	bash scripts/install-system-deps.sh test
	$(PY) -m pytest tests/integration

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# benchmarks of the load generator itself (not tests): results/bench-<UTC time>/, about 21 min on 2 cores
bench: build
	bash scripts/install-system-deps.sh bench
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench.run $(BENCH_ARGS)

# memory soak of a real distributed run (issue 14, goal 4): results/soak-<UTC time>/, 30 min + start-up
soak: build
	bash scripts/install-system-deps.sh bench
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) results .inferload model_repository/*/1/model.pt model_store/*.mar
