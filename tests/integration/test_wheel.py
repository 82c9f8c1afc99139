"""inferload as a user installs it: the wheel, in a fresh virtual environment, run outside the checkout.

Builds the wheel from a copy of the checkout (`pip wheel --no-deps --no-build-isolation`), installs
it with `--no-deps` into a new venv whose dependencies are those of the checkout's environment (a
.pth file after the venv's own site-packages; `pip check` then proves the wheel's declared
requirements are met by them), then, from a working folder outside the checkout and with nothing of
the checkout importable: `inferload validate` on a packaged sample scenario, `inferload demo` with
short phases (it builds the sample model into ./.inferload/models on first use) and a short
headless `locust -f <the packaged locustfile>` run against the real local Triton. When the checkout
has the native extension (`make build` with cargo: `inferload/_native.abi3.so`), the wheel carries
it, is tagged `cp310-abi3-<platform>`, and the module imports from the installed wheel and serves;
without it the wheel is pure (`py3-none-any`) and has no module. Installing the
dependencies themselves from the declared ranges is what `make test` does for the checkout
(constraints.txt); tests/unit/test_packaging.py checks every third-party import is declared.

Time: about 2 minutes on 2 cores, most of it the demo (two servers' cold start, four short phases).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.system_tools import REPO

#: the checkout's environment's packages: the installed wheel's dependencies
DEPENDENCIES = next(Path(p) for p in sys.path if p.endswith("site-packages"))
#: top-level entries of the checkout that are not part of a build (environments, results, caches, tests)
NOT_BUILT = {".venv", ".git", "results", ".inferload", "build", "dist", "tests", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
#: the checkout's native module (`make build` with cargo), if it has one
CHECKOUT_NATIVE = sorted((REPO / "inferload").glob("_native*.so"))


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    workdir: Path  # outside the checkout
    env: dict[str, str]

    def run(self, *command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / command[0]), *command[1:]],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def python(self, code: str) -> str:
        done = self.run("python", "-c", code, timeout_s=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def _not_built(folder: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n == "__pycache__" or n.endswith((".egg-info", ".mar", ".pt"))}
    if Path(folder) == REPO / "native":
        skipped.add("target")  # cargo's build folder (GBs): the module is already in inferload/
    return skipped | (NOT_BUILT & set(names) if Path(folder) == REPO else set())


def build_wheel(out: Path) -> Path:
    source = out / "source"
    shutil.copytree(REPO, source, ignore=_not_built)  # pip builds in the source folder: not in the checkout
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = out.glob("inferload-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(root)
    venv = root / "venv"
    # without pip or setuptools of its own: pip too comes from the checkout's environment
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # the dependencies come from the checkout's environment, after the venv's own packages (a bare
    # path: its .pth files, among them the checkout's editable install, are not read)
    (Path(site) / "zz_dependencies.pth").write_text(f"{DEPENDENCIES}\n")
    pip = [python, "-m", "pip", "install", "--no-compile", "--no-deps", "-q"]
    done = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr  # the wheel's declared requirements are all met
    workdir = root / "work"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INFERLOAD_HOME", "VIRTUAL_ENV")}
    # the venv's own programs first; the dependencies' programs (torchserve, locust) last
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", ""), str(Path(sys.executable).parent)])
    try:
        yield Installed(wheel, venv, workdir, env)
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    found = json.loads(
        installed.python(
            "import json, inferload, inferload.paths as p; "
            "print(json.dumps([inferload.__file__, str(p.LOCUSTFILE), str(p.scenarios_dir()), p.checkout_root()]))"
        )
    )
    package, locustfile, scenarios, checkout = found
    site_packages = str(installed.venv / "lib")
    assert package.startswith(site_packages) and locustfile.startswith(site_packages), found
    assert checkout is None and Path(locustfile).is_file()
    assert {p.name for p in Path(scenarios).glob("*.yaml")} == {p.name for p in (REPO / "scenarios").glob("*.yaml")}
    assert not installed.workdir.resolve().is_relative_to(REPO)


def test_the_wheel_carries_the_native_module_when_the_checkout_has_one(installed):
    origin = json.loads(
        installed.python(
            "import importlib.util, json; spec = importlib.util.find_spec('inferload._native'); print(json.dumps(spec and spec.origin))"
        )
    )
    if CHECKOUT_NATIVE:
        assert installed.wheel.name.endswith("-cp310-abi3-linux_x86_64.whl"), installed.wheel.name
        assert origin is not None and origin.startswith(str(installed.venv / "lib")), origin
        # the installed module serves: a reference server on free ports answers its health check
        code = (
            "import urllib.request, inferload._native as native; server = native.ReferenceServer('{}'); "
            "print(urllib.request.urlopen(f'http://127.0.0.1:{server.http_port}/v2/health/ready').status); server.stop()"
        )
        assert installed.python(code) == "200"
    else:
        assert installed.wheel.name.endswith("-py3-none-any.whl"), installed.wheel.name
        assert origin is None


def test_validate_a_packaged_sample_scenario(installed):
    scenarios = Path(installed.python("import inferload.paths as p; print(p.scenarios_dir())"))
    done = installed.run("inferload", "validate", str(scenarios / "steady.yaml"), str(scenarios / "compare.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": ok") == 2


def test_the_demo_builds_its_model_on_first_use_and_writes_its_summary(installed):
    out = installed.workdir / "demo"
    done = installed.run(
        *("inferload", "demo", "--model", "tiny", "--users", "4"),
        *("--steady", "3", "--burst", "3", "--warmup", "1", "--out", str(out)),
        *("--capacity-p99", "0"),  # the capacity pass is tested by test_cli.py; here the wheel's demo
        timeout_s=420,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "building the sample model 'tiny'" in done.stderr
    models = installed.workdir / ".inferload" / "models"  # built in the working folder, not in site-packages
    assert (models / "model_repository" / "tiny" / "1" / "model.pt").is_file()
    assert (models / "model_repository" / "tiny" / "config.pbtxt").is_file()
    assert (models / "model_store" / "tiny.mar").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert {"triton-grpc.steady", "torchserve-rest.steady"} <= set(summary["targets"])
    assert all(t["requests"] > 0 and t["failures"] == 0 for t in summary["targets"].values())


def test_locust_runs_a_scenario_with_the_packaged_locustfile(installed, local_servers):
    scenarios = Path(installed.python("import inferload.paths as p; print(p.scenarios_dir())"))
    locustfile = installed.python("import inferload.paths as p; print(p.LOCUSTFILE)")
    scenario = yaml.safe_load((scenarios / "steady.yaml").read_text())
    ports = local_servers.ports
    scenario.update(duration="4s", warmup="1s", shape={"kind": "steady", "users": 2})
    [target] = scenario["targets"]
    target.update(address=f"127.0.0.1:{ports.triton_grpc}", metrics_url=f"http://127.0.0.1:{ports.triton_metrics}/metrics")
    target.pop("slo")  # the mechanics are tested here, not this machine's latency
    path = installed.workdir / "steady-short.yaml"
    path.write_text(yaml.safe_dump(scenario))
    results = installed.workdir / "locust-results"
    done = installed.run(
        "python",
        "-m",
        "locust",
        "-f",
        locustfile,
        "--scenario",
        str(path),
        "--headless",
        "--results-dir",
        str(results),
        timeout_s=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    figures = summary["targets"]["triton-grpc-cnn"]
    assert figures["requests"] > 0 and figures["failures"] == 0, figures
