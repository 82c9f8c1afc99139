"""Every command README.md shows that tests/support/readme_commands.py lists in ``RUN``, run as written
(and the README's Locust lines, whatever they say); the others are listed there with why they are not,
and tests/unit/test_readme_listing.py holds every README command to one of the two.

Where they run: the commands assume a checkout's root as the working folder (`scenarios/...`,
`locustfiles/...`, and the default `.inferload/servers` and `results/<run id>/` relative to it).
Each runs in a fresh folder holding a copy of the checkout's `scenarios/` and `locustfiles/`, with
the venv's bin first on PATH, through bash as a user types it: the relative defaults are exercised
exactly as typed, and nothing lands in (or is read from) the developer's own `.inferload/` or
`results/`. The package itself is this checkout's (the editable install), so the models are its own.

The local servers run on the README's default ports (Triton 8000-8002, TorchServe 8080-8082) and
Locust's web UI on 8089: these must be free (other tests use free random ports); a busy one fails
the test, naming it. The headless runs (both shipped-scenario Locust runs and `inferload run
scenarios/triton-http.yaml --headless`) run in parallel, each from its own folder (their default run
ids could be the same second), on copies whose `duration` and `warmup` are cut to `RUN_LENGTH` and
`RUN_WARMUP` (`steady.yaml` is 60 s as shipped): what is tested is the commands, as typed, not
how long the samples run (each shipped scenario is validated here by `inferload validate`). A
breached SLO (p99 on a busy 2-core machine)
is the documented exit 1, not a wrong command: a run passes with exit 0, or 1 with the SLO failed
and no request failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferload.local.servers.ports import ServerPorts, port_is_free, service_name
from inferload.local.servers.procs import processes_mentioning
from tests.support.locust_runner import python_env
from tests.support.readme_commands import INFERLOAD_RUN, RUN, is_locust_run, locust_runs
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

WEB_UI = "http://127.0.0.1:8089/"
WEB_UI_PORT = 8089
RUN_TIMEOUT_S = 300
#: the headless runs' length and warm-up: enough windows past the warm-up for every figure the test reads
RUN_LENGTH = "12s"
RUN_WARMUP = "2s"
SCENARIOS_DIR = "python -c 'import inferload.paths as p; print(p.scenarios_dir())'"
RUN_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def fresh_folder(parent: Path) -> Path:
    """A working folder like a checkout's root: a copy of its scenarios/ and locustfiles/."""
    parent.mkdir(parents=True, exist_ok=True)
    for name in ("scenarios", "locustfiles"):
        shutil.copytree(REPO / name, parent / name)
    return parent


def with_short_runs(folder: Path) -> Path:
    """`folder`, its scenarios' `duration` and `warmup` cut to RUN_LENGTH and RUN_WARMUP (comments kept)."""
    for path in (folder / "scenarios").glob("*.yaml"):
        text = re.sub(r"(?m)^duration: *\S+", f"duration: {RUN_LENGTH}", path.read_text())
        path.write_text(re.sub(r"(?m)^warmup: *\S+", f"warmup: {RUN_WARMUP}", text))
    return folder


def shell(command: str, folder: Path, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`command` as a user types it in `folder` (bash, the venv's bin first on PATH)."""
    return subprocess.run(
        ["bash", "-c", command], cwd=folder, env=python_env(), capture_output=True, text=True, timeout=timeout_s
    )


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"`{done.args[-1]}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def busy_default_ports() -> list[str]:
    wanted = {**ServerPorts().to_dict(), "locust_web_ui": WEB_UI_PORT}
    return [f"{port} ({service_name(name)})" for name, port in wanted.items() if not port_is_free(port)]


@dataclass(frozen=True)
class ReadmeServers:
    folder: Path
    state_dir: Path
    up: subprocess.CompletedProcess[str]


@dataclass(frozen=True)
class Run:
    command: str
    folder: Path
    done: subprocess.CompletedProcess[str]
    results_dir: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.results_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def readme_servers(built_models, tmp_path_factory) -> Iterator[ReadmeServers]:
    busy = busy_default_ports()
    if busy:
        pytest.fail(f"the README's default ports must be free for this test; in use: {', '.join(busy)}")
    folder = fresh_folder(tmp_path_factory.mktemp("readme") / "checkout")
    state_dir = folder / ".inferload" / "servers"
    try:
        up = shell("inferload servers up", folder)
        assert up.returncode == 0, explain(up)
        yield ReadmeServers(folder, state_dir, up)
    finally:
        down = shell("inferload servers down", folder)
        assert down.returncode == 0, explain(down)
        assert set(json.loads(down.stdout)["stopped"]) == {"triton", "torchserve"}, explain(down)
        assert processes_mentioning(str(state_dir)) == [], "processes left running after `inferload servers down`"
        assert busy_default_ports() == [], "ports still in use after `inferload servers down`"


@pytest.fixture(scope="module")
def headless_runs(readme_servers: ReadmeServers, tmp_path_factory) -> dict[str, Run]:
    """The README's headless Locust commands and `inferload run ... --headless`, in parallel, each in its own folder."""
    commands = [*locust_runs(headless=True), *(c for c in RUN[INFERLOAD_RUN] if "--headless" in c.split())]
    root = tmp_path_factory.mktemp("readme-runs")
    folders = [with_short_runs(fresh_folder(root / f"run-{i}")) for i in range(len(commands))]
    started = [
        subprocess.Popen(["bash", "-c", c], cwd=f, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c, f in zip(commands, folders, strict=True)
    ]
    runs: dict[str, Run] = {}
    for command, folder, process in zip(commands, folders, started, strict=True):
        try:
            stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        done = subprocess.CompletedProcess(["bash", "-c", command], process.returncode, stdout, stderr)
        written = sorted(p.parent for p in (folder / "results").glob("*/summary.json"))
        assert len(written) == 1, f"expected one results/<run id>/summary.json; found {written}\n{explain(done)}"
        runs[command] = Run(command, folder, done, written[0])
    return runs


def test_validate_on_every_shipped_scenario(tmp_path):
    folder = fresh_folder(tmp_path)
    done = shell(RUN["inferload validate SCENARIO..."][0], folder, timeout_s=60)
    assert done.returncode == 0, explain(done)
    shipped = sorted(p.name for p in (REPO / "scenarios").glob("*.yaml"))
    assert {"burst.yaml", "compare.yaml", "steady.yaml", "triton-http.yaml"} <= set(shipped)
    assert done.stdout.splitlines() == [f"scenarios/{name}: ok" for name in shipped]


def test_the_python_one_liners(tmp_path):
    folder = fresh_folder(tmp_path)
    scenarios = shell(SCENARIOS_DIR, folder, timeout_s=60)
    assert scenarios.returncode == 0, explain(scenarios)
    assert (Path(scenarios.stdout.strip()) / "steady.yaml").is_file()
    key = shell(RUN_KEY, folder, timeout_s=60)
    assert key.returncode == 0, explain(key)
    assert len(key.stdout.strip()) >= 16  # what INFERLOAD_RUN_KEY needs


def test_servers_up_and_status_on_the_default_ports(readme_servers: ReadmeServers):
    up = json.loads(readme_servers.up.stdout)
    assert {s: up["servers"][s]["ready"] for s in ("triton", "torchserve")} == {"triton": True, "torchserve": True}
    status = shell("inferload servers status", readme_servers.folder, timeout_s=60)
    assert status.returncode == 0, explain(status)
    state = json.loads(status.stdout)
    assert state["running"] is True and Path(state["state_dir"]).resolve() == readme_servers.state_dir.resolve()
    assert all(all(state["servers"][s]["ports_open"].values()) for s in ("triton", "torchserve"))
    assert (readme_servers.state_dir / "state.json").is_file()  # the relative default, under the working folder
    saved = json.loads((readme_servers.state_dir / "state.json").read_text())
    assert saved["ports"] == ServerPorts().to_dict()


def test_the_headless_locust_commands_and_inferload_run(headless_runs: dict[str, Run]):
    assert len(headless_runs) >= 3
    for command, run in headless_runs.items():
        summary = run.summary
        targets = summary["targets"]
        assert targets and all(t["requests"] > 0 and t["failures"] == 0 for t in targets.values()), (command, targets)
        assert run.results_dir.name == summary["run_id"]  # the default results/<run id>/
        slo_breached = summary["slo"]["passed"] is False
        assert run.done.returncode == (1 if slo_breached else 0), explain(run.done)
        assert summary["interrupted"] is False
        assert summary["warmup_s"] == float(RUN_WARMUP.removesuffix("s"))  # the copies' cut, not the samples' length


def test_compare_the_two_runs(headless_runs: dict[str, Run], tmp_path):
    first, second = [run.results_dir for command, run in headless_runs.items() if is_locust_run(command)][:2]
    done = shell(f"inferload compare {first} {second}", tmp_path, timeout_s=60)
    assert done.returncode == 0, explain(done)
    assert "triton-grpc-cnn" in done.stdout
    as_json = shell(f"inferload compare {first} {second} --json", tmp_path, timeout_s=60)
    assert as_json.returncode == 0, explain(as_json)
    assert json.loads(as_json.stdout)
    # the same configuration twice: not a regression beyond the noise
    gate = shell(f"inferload compare {first} {second} --fail-on p99:+400%", tmp_path, timeout_s=60)
    assert gate.returncode == 0, explain(gate)
    assert "regression gate (noise from A's windows and B's windows" in gate.stdout
    # B's target under another name (its summary.json rewritten): --rename pairs it with A's
    summary = json.loads((second / "summary.json").read_text())
    summary["targets"] = {"renamed": summary["targets"]["triton-grpc-cnn"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    renamed = shell(
        f"inferload compare {first} {tmp_path / 'summary.json'} --rename triton-grpc-cnn=renamed", tmp_path, timeout_s=60
    )
    assert renamed.returncode == 0, explain(renamed)
    assert "target: triton-grpc-cnn (in B: renamed)" in renamed.stdout, renamed.stdout


def test_report_rewrites_report_html(headless_runs: dict[str, Run]):
    run = next(iter(headless_runs.values()))
    report = run.results_dir / "report.html"
    report.unlink(missing_ok=True)
    done = shell(f"inferload report results/{run.results_dir.name}", run.folder)
    assert done.returncode == 0, explain(done)
    assert report.stat().st_size > 0
    ranged = shell(f"inferload report results/{run.results_dir.name} --from 1 --to 20", run.folder)
    assert ranged.returncode == 0, explain(ranged)
    assert "[all], " in ranged.stdout and "s after the start" in ranged.stdout and "p99" in ranged.stdout


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses something listens on at `port` (from /proc/net/tcp: state 0A is LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def test_the_web_ui_commands_start_answer_and_stop_on_ctrl_c(readme_servers: ReadmeServers):
    """Both the plain `locust -f` on inferload's locustfile and `inferload run` bind loopback (docs/operations.md)."""
    inferload_web_ui = [c for c in RUN[INFERLOAD_RUN] if "--headless" not in c.split()]
    for command in [*locust_runs(headless=False), *inferload_web_ui]:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=readme_servers.folder,
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            wait_until(lambda: urllib.request.urlopen(WEB_UI, timeout=2).status == 200, 60, f"{WEB_UI} from `{command}`")
            assert listening_addresses(WEB_UI_PORT) == {"127.0.0.1"}, command
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
            output, _ = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        # Locust's own code for an idle web UI, which the inferload CLI keeps: Ctrl-C is how a web UI is quit
        assert process.returncode == 0, f"`{command}` exited {process.returncode} after Ctrl-C:\n{output[-3000:]}"
        wait_until(lambda: port_is_free(WEB_UI_PORT) or None, 10, f"port {WEB_UI_PORT} to be free again")
