# inferload: the two set-up commands are `make demo` and `make test` (see README).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit python-units rust-units integration integration-serial fallback lint build native bench soak clean

# the native extension (native/, Rust + PyO3, built by maturin): only where cargo is
CARGO       ?= cargo
# cargo's build folder, out of the checkout as the server venvs below are: a fresh clone on a machine that
# built before compiles only what changed (cargo's own fingerprints decide; its lock keeps two builds apart)
CARGO_TARGET_DIR ?= $(HOME)/.cache/inferload/cargo-target
export CARGO_TARGET_DIR
HAVE_CARGO  := $(shell command -v $(CARGO) >/dev/null 2>&1 && echo yes)
NATIVE_SO   := inferload/_native.abi3.so
NATIVE_SRC  := $(shell find native/src -name '*.rs' 2>/dev/null) native/Cargo.toml native/Cargo.lock native/pyproject.toml

# pyproject.toml declares ranges; constraints.txt pins the tested set installed here, by uv (the same
# set as pip's; pip's find-links passed on). Bytecode compiled at install, as pip does: where
# PYTHONDONTWRITEBYTECODE is set (CI here) every process would otherwise compile what it imports
$(STAMP): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt uv
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) \
		-c constraints.txt -e '.[servers,test,lint]'
	touch $(STAMP)

# inferload's own bytecode too (an editable install is not compiled by uv): under PYTHONDONTWRITEBYTECODE each
# Locust, CLI and server process would compile it again (about 0.1 CPU-s a Locust); a stale file is recompiled
build: $(STAMP) native
	@echo "== make build: $$(date -u +%T) UTC"
	$(PY) -m compileall -q inferload
	bash scripts/install-system-deps.sh servers
	$(PY) -m inferload.local.models.build
	$(PY) -m inferload.local.models.llm

# rebuilt only when a file of native/ changed since the module was made
ifeq ($(HAVE_CARGO),yes)
native: $(NATIVE_SO)
$(NATIVE_SO): $(NATIVE_SRC) | $(STAMP)
	+bash scripts/build-native.sh $(PY)
else
native:
	@echo "inferload: cargo not found: the native extension is not built, inferload runs its Python path"
endif

demo: build
	$(VENV)/bin/inferload demo

# the README's test command (and CI's): the linters and the fast layer side by side (each mostly one
# core; each target's output printed whole when it ends), then the real servers (with the fallback
# subset: `make integration` runs it)
test:
	$(MAKE) --no-print-directory --output-sync=target -j2 lint unit
	$(MAKE) --no-print-directory integration
	@echo "== make test: done $$(date -u +%T) UTC"

# fast layer: no torch, no servers. Python's: the native engine first, where cargo is (its units need
# it), then two pytest sessions side by side by module (tests/support/shards.py: the shard phase only),
# each printed whole when it ends. Rust's (`cargo test`, where cargo is): a target of its own, so that
# under `make -j2 lint unit` it runs beside Python's once lint has ended
unit: python-units rust-units

python-units: $(STAMP) native
	@echo "== make unit: $$(date -u +%T) UTC"
	$(PY) -m tests.support.shards --shards 2 tests/unit

rust-units:
ifeq ($(HAVE_CARGO),yes)
	+cd native && $(CARGO) test --locked --quiet
endif

# BentoML's and KServe's own venvs (made on first use, keyed by a hash of their requirements) are kept
# out of the clone, so a fresh clone on the same machine reuses them (tests/integration/test_bentoml_service.py,
# test_kserve_server.py; a CI cache of this folder keyed on bentoml_local.py, kserve_local.py and server_venv.py)
INFERLOAD_VENVS ?= $(HOME)/.cache/inferload/venvs
export INFERLOAD_VENVS

# the layer as INTEGRATION_SHARDS pytest sessions side by side, then the quiet modules (rates judged by
# intervals) in three sessions beside the fallback subset on the Python transport, then the modules that want
# the machine to themselves (tests/support/shards.py, docs/testing.md)
INTEGRATION_SHARDS ?= 3
export INTEGRATION_SHARDS
# SHARDS_ARGS=--record: the run also writes each module's seconds into tests/integration/durations.json
SHARDS_ARGS ?=
integration: build
	@echo "== make integration: $$(date -u +%T) UTC"
	bash scripts/install-system-deps.sh test
	$(PY) -m tests.support.shards $(SHARDS_ARGS) $(addprefix --python-transport ,$(FALLBACK_TESTS)) -- --durations=10

# the same layer in one pytest session, one test after another, then the fallback subset
integration-serial: build
	@echo "== make integration-serial: $$(date -u +%T) UTC"
	bash scripts/install-system-deps.sh test
	$(PY) -m pytest --durations=60 tests/integration
	$(MAKE) fallback

# the Python transport (the fallback where the native module cannot load) on a representative subset, each
# Locust run a process of its own as a user's `inferload run` starts it (not a fork of a warm Locust):
# every target kind, open loop, distributed, TorchServe's refused sequences, expected answers (the full suite
# above runs on the engine when it is built)
FALLBACK_TESTS := \
	tests/integration/test_locust_runs.py::test_each_user_class_sends_real_inferences_and_the_run_ends_on_time \
	tests/integration/test_kserve_server.py \
	tests/integration/test_bentoml_service.py::test_a_headless_run_has_no_failures_and_bentomls_own_figures \
	tests/integration/test_open_loop.py::test_a_poisson_run_achieves_its_rate_and_sends_every_arrival \
	tests/integration/test_distributed.py::test_two_workers_on_other_hosts_give_exact_percentiles_and_summed_totals \
	tests/integration/test_tls.py \
	tests/integration/test_replay.py::test_a_distributed_replay_keeps_the_global_schedule \
	tests/integration/test_torchserve_sequences.py::test_users_as_many_as_the_models_sequences_reopen_a_refused_sequence_after_a_pause \
	tests/integration/test_expected_outputs.py::test_the_right_expected_values_pass_every_request \
	tests/integration/test_expected_outputs.py::test_a_wrong_expected_value_fails_every_request_with_one_message_saying_what_came
fallback: build
	@echo "== make fallback: $$(date -u +%T) UTC"
	INFERLOAD_TRANSPORT=python INFERLOAD_WARM_LOCUST=0 $(PY) -m pytest $(FALLBACK_TESTS)

lint: $(STAMP)
	@echo "== make lint: $$(date -u +%T) UTC"
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
ifeq ($(HAVE_CARGO),yes)
	+cd native && $(CARGO) fmt --check
	+cd native && $(CARGO) clippy --locked --all-targets --quiet -- -D warnings
endif

# benchmarks of the load generator itself (not tests): the peers side by side, issue 20's goals; results/bench-<UTC time>/ (BENCH_ARGS=--quick: one short round)
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
	rm -rf $(VENV) results .inferload model_repository/*/1/model.pt model_store/*.mar $(NATIVE_SO)
