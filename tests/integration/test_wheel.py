"""inferload as a user installs it: the wheel, in a fresh virtual environment, run outside the checkout.

Builds the wheel from a copy of the checkout (`pip wheel --no-deps --no-build-isolation`), installs
it with `--no-deps` into a new venv whose dependencies are those of the checkout's environment (a
.pth file after the venv's own site-packages; `pip check` then proves the wheel's declared
requirements are met by them), then, from a working folder outside the checkout and with nothing of
the checkout importable: `inferload validate` on a packaged sample scenario, `inferload demo` as
a user runs it (short phases and a two-run capacity pass; it builds the sample model into
./.inferload/models on first use: both servers side by side, its summary's contract, and a
Ctrl-C that keeps the phase measured and stops the servers) and a short headless `locust -f <the
packaged locustfile>` run against the reference server. When the checkout
has the native extension (`make build` with cargo: `inferload/_native.abi3.so`), the wheel carries
it, is tagged `cp310-abi3-<platform>`, and the module imports from the installed wheel and serves;
without it the wheel is pure (`py3-none-any`) and has no module. Installing the
dependencies themselves from the declared ranges is what `make test` does for the checkout
(constraints.txt); tests/unit/test_packaging.py checks every third-party import is declared.

Time: about 2.5 minutes on 2 cores, most of it the demo (two servers' cold start, four short
phases, the capacity pass) and the Ctrl-C (Triton's cold start again: that demo compares Triton alone).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from inferload.launch.warm_locust import SHARED_SOCKET_ENV
from inferload.local.servers.procs import processes_mentioning
from tests.support.reference_server import reference_server, reference_target
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

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
    # nothing of the checkout's: its path (pip would find the checkout's inferload installed), its home, its
    # venv, the session's warm Locust (which runs the checkout's code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INFERLOAD_HOME", "VIRTUAL_ENV", SHARED_SOCKET_ENV)}
    # the venv's own programs first; the dependencies' programs (torchserve, locust) last
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", ""), str(Path(sys.executable).parent)])
    pip = [python, "-m", "pip", "install", "--no-deps"]  # compiled, as a user's pip does
    done = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and (venv / "bin" / "inferload").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, timeout=120, env=env)
    assert check.returncode == 0, check.stdout + check.stderr  # the wheel's declared requirements are all met
    workdir = root / "work"
    workdir.mkdir()
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


@pytest.fixture(scope="module")
def demo_run(installed: Installed) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`inferload demo` with short phases, from the installed wheel in a folder outside the checkout:
    it builds its model there on first use."""
    out = installed.workdir / "demo"
    done = installed.run(
        *("inferload", "demo", "--model", "tiny", "--users", "4", "--warmup", "1", "--steady", "4", "--burst", "4"),
        # the search's logic is test_capacity's (its truth exact): here, that it runs and is printed
        *("--capacity-runs", "2", "--out", str(out)),
        timeout_s=420,
    )
    return done, out


def test_the_demo_builds_its_model_on_first_use_in_the_working_folder(demo_run, installed):
    done, _ = demo_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "building the sample model 'tiny'" in done.stderr
    models = installed.workdir / ".inferload" / "models"  # built in the working folder, not in site-packages
    assert (models / "model_repository" / "tiny" / "1" / "model.pt").is_file()
    assert (models / "model_repository" / "tiny" / "config.pbtxt").is_file()
    assert (models / "model_store" / "tiny.mar").is_file()


def test_the_demo_prints_both_servers_side_by_side(demo_run):
    done, _ = demo_run
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout[done.stdout.index("p99 (ms)") - 600 :]
    header = next(line for line in done.stdout.splitlines() if "triton-grpc.steady" in line and "torchserve-rest.steady" in line)
    assert "capacity under p99 <= 100 ms" in done.stdout and "  triton: " in done.stdout and "  torchserve: " in done.stdout
    assert "triton-grpc.burst" in header and "torchserve-rest.burst" in header
    # one sure answer per server: an interval only where the search reached ±10 %, else what was measured
    capacity = json.loads((demo_run[1] / "summary.json").read_text())["capacity"]
    for server, answer in capacity.items():
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"  {server}: "))
        if answer.get("precision_reached"):
            low, high = answer["interval_rps"]
            # (the interval is written rounded: its width within a hair of the precision asked; the line
            # prints it to four significant digits)
            assert high is not None and (high - low) / low <= 0.2 + 1e-3, (line, answer)
            printed = re.search(r"\[([\d,.]+), ([\d,.]+)\]", line)
            assert printed is not None, (line, answer)
            assert [float(x.replace(",", "")) for x in printed.groups()] == pytest.approx([low, high], rel=1e-3), (line, answer)
        else:
            assert " at least " in line or " no rate met " in line, (line, answer)
    for row in (
        "p50 (ms)",
        "p95 (ms)",
        "p99 (ms)",
        "throughput (req/s)",
        "avg batch (server)",
        "queue (ms, server)",
        "cold start (s)",
    ):
        assert row in table
    assert "[1/6]" in done.stdout and "[5/6]" in done.stdout and "[6/6]" in done.stdout  # progress while it runs


def test_the_demo_summary_follows_the_contract(demo_run):
    _, out = demo_run
    summary = json.loads((out / "summary.json").read_text())
    assert {"run_id", "scenario", "started_at", "duration_s", "warmup_s", "workers", "targets", "slo"} <= set(summary)
    assert summary["warmup_s"] == 1
    assert set(summary["targets"]) == {
        "triton-grpc.steady",
        "torchserve-rest.steady",
        "triton-grpc.burst",
        "torchserve-rest.burst",
    }
    for name, target in summary["targets"].items():
        assert target["server"] == ("triton" if name.startswith("triton") else "torchserve")
        assert target["protocol"] == ("grpc" if name.startswith("triton") else "http")
        assert target["model"] == "tiny"
        assert target["requests"] > 0 and target["failures"] == 0 and target["error_rate"] == 0
        assert target["throughput_rps"] > 0
        latency = target["latency_ms"]
        assert set(latency) == {"mean", "p50", "p90", "p95", "p99", "p999", "max"}
        assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"] <= latency["p999"] <= latency["max"]
        assert target["cold_start_s"] > 0
        side = target["server_side"]
        assert set(side) >= {"queue_ms_avg", "compute_ms_avg", "request_ms_avg", "avg_batch_size", "batch_size_histogram"}
        # batch sizes come from the server: its histogram accounts for the items it ran
        items = sum(int(size) * count for size, count in side["batch_size_histogram"].items())
        assert items == pytest.approx(target["requests"], rel=0.35), (name, side, target["requests"])
        assert side["avg_batch_size"] >= 1
        if name.endswith(".burst"):  # the burst phase: its one burst (3 s from 2 s after the warm-up), peak and recovery
            (burst,) = target["bursts"]
            assert (burst["start_s"], burst["end_s"]) == (3, 5)
            assert burst["peak_p99_ms"] > 0 and burst["failures"] == 0
            assert set(burst) == {
                "start_s",
                "end_s",
                "pre_burst_p99_ms",
                "peak_p99_ms",
                "recovery_s",
                "server_recovery_s",
                "failures",
                "unsent",
            }
        else:
            assert "bursts" not in target
    assert "Bursts: peak and recovery" in (out / "triton-grpc.burst" / "report.html").read_text()
    # the closing capacity pass: each server's capacity under p99 <= 100 ms, and its settings read back from it
    capacity = summary["capacity"]
    assert set(capacity) == {"triton", "torchserve"}
    for server, answer in capacity.items():
        assert answer["p99_ms"] == 100
        assert answer["max_rps"] is None or answer["first_failing_rps"] is None or answer["max_rps"] < answer["first_failing_rps"]
        assert (out / "capacity" / server / "sweep.json").is_file()
    for answer in capacity.values():  # every rate the search measured, with its p99 interval and verdict
        assert answer.get("curve") is None or all(p["verdict"] in ("pass", "fail", "unsure") for p in answer["curve"])
    if any(answer.get("curve") for answer in capacity.values()):
        page = (out / "report.html").read_text()
        assert "each server as configured</h2>" in page and "every server&#x27;s p99 against the offered rate" in page
    assert "instance(s), max_batch_size 32" in capacity["triton"]["config"]  # the sample model's config.pbtxt
    assert "batch size 8" in capacity["torchserve"]["config"]
    assert (out / "windows.csv").read_text().startswith("window_start,")
    for phase in summary["targets"]:
        assert (out / phase / "summary.json").exists()


def test_locust_runs_a_scenario_with_the_packaged_locustfile(installed):
    """A packaged scenario, its target moved to the reference server's model: what is tested is the
    packaged locustfile and its options, not a server or this machine's latency."""
    scenarios = Path(installed.python("import inferload.paths as p; print(p.scenarios_dir())"))
    locustfile = installed.python("import inferload.paths as p; print(p.LOCUSTFILE)")
    scenario = yaml.safe_load((scenarios / "steady.yaml").read_text())
    scenario.update(duration="4s", warmup="1s", shape={"kind": "steady", "users": 2})
    [target] = scenario["targets"]
    for key in ("slo", "outputs", "metrics_url"):
        target.pop(key)
    path = installed.workdir / "steady-short.yaml"
    results = installed.workdir / "locust-results"
    with reference_server(max_batch_size=0) as server:
        target.update(reference_target(target["name"], target["kind"], server.grpc_address))
        path.write_text(yaml.safe_dump(scenario))
        done = installed.run(
            *("python", "-m", "locust", "-f", locustfile, "--scenario", str(path)),
            *("--headless", "--results-dir", str(results)),
            timeout_s=120,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    figures = summary["targets"]["triton-grpc-cnn"]
    assert figures["requests"] > 0 and figures["failures"] == 0, figures
    assert figures["model"] == "identity"


def test_ctrl_c_during_the_demo_keeps_the_measured_phase_and_stops_the_servers(installed, demo_run):
    """A terminal's Ctrl-C reaches the demo's whole process group: the running phase ends early and
    keeps its results, no later phase starts, the servers are stopped, and the exit code says SIGINT."""
    out = installed.workdir / "demo-cut"  # (after demo_run: its model is built)
    command = [str(installed.venv / "bin" / "inferload"), "demo", "--model", "tiny", "--users", "2", "--warmup", "1"]
    command += ["--steady", "60", "--burst", "60", "--servers", "triton", "--out", str(out)]  # one server's start is enough
    demo = subprocess.Popen(
        command,
        cwd=installed.workdir,
        env=installed.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(demo.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # the first phase's first progress line comes 5 s into its run (1 s of it warm-up)
        wait_until(lambda: any(" s / 61 s" in line for line in lines), timeout_s=180, what="the first phase's progress line")
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    reader.join(timeout=10)
    output = "".join(lines)
    assert demo.returncode == 130, output
    # [1/4] the start, [2/4] its steady phase, cut; no burst phase, no capacity pass
    assert "[2/4]" in output and "[3/4]" not in output and "[4/4]" not in output, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert list(summary["targets"]) == ["triton-grpc.steady"]
    assert summary["targets"]["triton-grpc.steady"]["requests"] > 0
    assert processes_mentioning(str(out)) == []
