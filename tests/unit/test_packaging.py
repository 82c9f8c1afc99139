"""Packaging without building a wheel (tests/integration/test_wheel.py builds and installs one):
declared dependencies, the data a wheel carries, where files are found installed, the locustfiles.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from inferload import paths
from inferload.local.models import build
from inferload.local.models import specs as model_paths
from inferload.local.models.specs import MODEL_NAMES
from tests.support.system_tools import REPO

#: modules the code imports that no distribution provides: Triton's Python-backend stub has it
PROVIDED_AT_RUN_TIME = {
    "kserve",  # inferload/local/servers/kserve_model.py runs in KServe's own venv (kserve_local)
    "uvicorn",  # the same file: KServe's REST server
    "bentoml",  # inferload/local/servers/bentoml_service.py runs in BentoML's own venv (bentoml_local)
    "triton_python_backend_utils",
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return normalise(match.group(0))


def declared() -> dict[str, set[str]]:
    """'core' and each extra -> the distributions pyproject.toml names there."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"core": set(map(requirement_name, project["dependencies"]))}
    for extra, requirements in project["optional-dependencies"].items():
        groups[extra] = set(map(requirement_name, requirements))
    return groups


def third_party_imports(folders: list[Path]) -> dict[str, list[str]]:
    """Top-level module -> the files importing it, for every absolute import outside the stdlib and the
    project (and the file beside it that a script run from its own folder imports: KServe's and
    Triton's model files in inferload/local/servers)."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                beside = (path.parent / f"{top}.py").is_file()  # a script's own module beside it (run from its folder)
                if top not in sys.stdlib_module_names and top not in {"inferload", "collectors", "__future__"} and not beside:
                    found.setdefault(top, []).append(str(path.relative_to(REPO)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    groups = declared()
    everything = set().union(*groups.values())
    distributions = importlib.metadata.packages_distributions()
    imports = third_party_imports([REPO / "inferload", REPO / "collectors"])
    assert {"locust", "grpc", "requests", "urllib3", "geventhttpclient"} <= set(imports)  # the scan sees them
    undeclared = {
        module: files
        for module, files in imports.items()
        if module not in PROVIDED_AT_RUN_TIME and not {normalise(d) for d in distributions.get(module, [])} & everything
    }
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"
    # torch and the servers are for the local servers only: the load generator must not need them
    assert not {"torch", "nvidia-pytriton", "torchserve"} & groups["core"]


def test_constraints_pin_every_declared_distribution_exactly():
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: expected name==version; got {line!r}"
            pins[normalise(name)] = version
    missing = set().union(*declared().values()) - set(pins)
    assert missing == set(), f"declared in pyproject.toml, not pinned in constraints.txt: {sorted(missing)}"
    assert pins["torch"] == "2.13.0"  # the CPU wheel on disk; anything looser downloads a CUDA build
    ranges = "\n".join(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    assert "==" not in ranges, "pyproject.toml declares ranges; exact pins go to constraints.txt"


def test_the_wheel_carries_every_sample_scenario_config_and_handler():
    """setup.py's package data patterns, matched against the checkout's files (one source)."""
    setup_py = ast.parse((REPO / "setup.py").read_text())
    call = next(n for n in ast.walk(setup_py) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    package_data = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "package_data"))
    folders = ast.literal_eval(next(n.value for n in setup_py.body if isinstance(n, ast.Assign) and n.targets[0].id == "SAMPLES"))

    def shipped(folder: str) -> set[str]:
        package = next(p for p, f in folders.items() if f == folder)
        files = {p.relative_to(REPO / folder).as_posix() for p in (REPO / folder).rglob("*") if p.is_file()}
        return {f for f in files if any(fnmatch.fnmatch(f, pattern) for pattern in package_data[package])}

    assert shipped("scenarios") == {p.name for pattern in ("*.yaml", "*.csv") for p in (REPO / "scenarios").glob(pattern)}
    configs = shipped("model_repository")
    for model in MODEL_NAMES:
        assert {f"{model}/config.pbtxt", f"{model}/configs/gpu_libtorch.pbtxt"} <= configs
    assert not any(f.endswith(("model.pt", "model.py")) for f in configs)  # built, never shipped
    assert shipped("model_store") == {"handler.py"}


def test_from_a_checkout_files_are_the_checkouts_own():
    assert paths.checkout_root() == REPO
    assert paths.scenarios_dir() == REPO / "scenarios"
    assert model_paths.artifacts_root() == REPO
    assert model_paths.handler_source() == REPO / "model_store" / "handler.py"
    assert paths.LOCUSTFILE == REPO / "inferload" / "locustfile.py"


def test_installed_the_models_are_built_under_inferload_home(tmp_path, monkeypatch):
    monkeypatch.setattr(model_paths, "checkout_root", lambda: None)
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "home"))
    assert model_paths.artifacts_root() == tmp_path / "home" / "models"
    monkeypatch.delenv(paths.HOME_ENV)
    monkeypatch.chdir(tmp_path)
    assert model_paths.artifacts_root() == tmp_path / ".inferload" / "models"


def test_a_build_outside_the_checkout_copies_the_shipped_triton_configs(tmp_path):
    config = build.install_triton_configs("tiny", tmp_path)
    assert config == tmp_path / "model_repository" / "tiny" / "config.pbtxt"
    assert config.read_text() == (REPO / "model_repository" / "tiny" / "config.pbtxt").read_text()
    assert (config.parent / "configs" / "gpu_libtorch.pbtxt").is_file()
    assert not build.is_built("tiny", tmp_path)  # no model.pt, no .mar yet
    assert build.is_built("tiny", REPO) in (True, False)  # cheap: no torch needed to ask


def run_locustfile(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "command",
    [["-m", "inferload.locustfile"], ["-m", "locust", "-f", "locustfiles/inferload_locustfile.py"]],
    ids=["packaged", "checkout-entry"],
)
def test_both_locustfiles_ask_for_a_scenario(command):
    done = run_locustfile(*command, "--headless")
    assert done.returncode == 2, done.stderr
    assert "no scenario given: pass --scenario FILE" in done.stderr


def test_python_m_inferload_locustfile_is_locust_running_the_scenario():
    """`--list` makes Locust load the locustfile, parse its options and list its users (no run)."""
    done = run_locustfile("-m", "inferload.locustfile", "--scenario", "scenarios/compare.yaml", "--results-dir", "x", "--list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Available", "Users:", "TritonGrpcCnnUser", "TorchserveCnnUser"]


def test_the_docs_fixed_scenario_locustfile_binds_the_scenario_classes_itself(tmp_path):
    """The first Python block of docs/python-api.md: `scenario_classes` with a fixed scenario, its
    user class bound by the locustfile."""
    text = (REPO / "docs" / "python-api.md").read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    assert "scenario_classes(" in block
    locustfile = tmp_path / "bound_classes.py"
    locustfile.write_text(block)
    done = run_locustfile("-m", "locust", "-f", str(locustfile), "--results-dir", "x", "--list")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Available", "Users:", "TritonGrpcCnnUser"]
