"""A dead server is not hammered, and a stalled one shows as zero-request windows.

Self-contained real `locust` runs: a target on a loopback port where nothing listens (refused at
once), and a tiny TorchServe-like server of the test's own, started apart and stopped with SIGSTOP
in the middle of a run (the shared Triton of the other tests is left alone).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.locust_runner import LocustRun, run_locust, unsent_before_the_stop
from tests.support.ports import free_port
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.waiting import wait_until

TINY_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

port, marker, ready_after = int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
served = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global served
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"[0]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        served += 1
        if served == ready_after:
            marker.write_text("busy")

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def failure_rows(run: LocustRun) -> list[dict[str, str]]:
    return [row for row in run.failures_csv if int(row.get("Occurrences") or 0)]


def is_refused(row: dict[str, str]) -> bool:
    """Locust's failures CSV holds the error's repr: the class and its stable message."""
    return row["Error"].startswith("ConnectionRefused('refused: cannot connect to")


def test_a_refused_target_gets_a_few_attempts_per_user_second_all_counted_as_refused(tmp_path):
    port = free_port()  # nothing listens there
    users, duration_s = 8, 6
    scenario = write_scenario(
        tmp_path,
        {
            "name": "refused",
            "duration": f"{duration_s}s",
            "targets": [
                tiny_target("grpc-down", "triton-grpc", f"127.0.0.1:{port}"),
                tiny_target("rest-down", "torchserve-rest", f"http://127.0.0.1:{port}"),
            ],
            "shape": {"kind": "steady", "users": users},
        },
    )
    run = run_locust(scenario, tmp_path, "--skip-start-checks")  # down at start: the start checks would exit 2

    assert run.returncode == 1, run.output  # every request failed
    for name, target in run.summary["targets"].items():
        per_user_second = target["requests"] / ((users / 2) * duration_s)
        # backing off 10 ms .. 1 s: ~2 attempts per user-second (without it: thousands)
        assert 0.5 < per_user_second < 10, (name, target["requests"])
        assert target["failures"] == target["requests"]
        # the outage is reported as one streak of refusals (steady state only: warm-up ones are not in `failures`)
        (outage,) = target["outages"]
        assert outage["start"] <= outage["end"]
        assert outage["failures"] >= target["failures"]
    rows = failure_rows(run)
    assert rows and all(is_refused(row) for row in rows), rows
    # one failure per attempt: Locust's own count as it exits (--json-file) is the summary's; not its
    # failures CSV, which it rewrites once a second and does not write at the end (on a loaded
    # machine the last second's attempts, one per user, were missing from it)
    counted = {entry["name"]: entry["num_failures"] for entry in run.stats_json}
    assert counted == {name: target["failures"] for name, target in run.summary["targets"].items()}


def test_open_loop_arrivals_to_a_refused_target_keep_their_schedule(tmp_path):
    port = free_port()
    rate, duration_s = 50, 5
    scenario = write_scenario(
        tmp_path,
        {
            "name": "refused-open",
            "duration": f"{duration_s}s",
            "targets": [tiny_target("rest-down", "torchserve-rest", f"http://127.0.0.1:{port}")],
            "shape": {"kind": "constant-rate", "rate": rate, "max_in_flight": 4},
        },
    )
    run = run_locust(scenario, tmp_path, "--skip-start-checks")  # down at start: the start checks would exit 2

    target = run.summary["targets"]["rest-down"]
    open_loop = target["open_loop"]
    # no arrival waited on a back-off: none unsent while the run went on, at most the 4 senders' worth at the stop
    assert unsent_before_the_stop(run, "rest-down") == [] and open_loop["unsent"] <= 4, open_loop
    assert open_loop["achieved_ratio"] == pytest.approx(1.0, abs=0.05)
    assert target["requests"] == pytest.approx(rate * duration_s, rel=0.1)  # one attempt per arrival
    assert target["failures"] == target["requests"]
    assert all(is_refused(row) for row in failure_rows(run))


def _accepts_connections(port: int) -> bool:
    """True once a TCP connection to the port succeeds; a refusal raises OSError (wait_until retries)."""
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


@pytest.fixture
def tiny_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """A TorchServe-like `POST /predictions/<model>` answering `[0]`, in a process of its own."""
    port, marker = free_port(), tmp_path / "server-busy"
    script = tmp_path / "tiny_server.py"
    script.write_text(TINY_SERVER)
    process = subprocess.Popen([sys.executable, str(script), str(port), str(marker), "200"])
    try:
        wait_until(lambda: _accepts_connections(port), 20, "the tiny server")
        yield process, port, marker
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)


def test_a_stalled_server_shows_as_windows_with_zero_requests(tmp_path, tiny_server):
    process, port, marker = tiny_server
    stall_s = 3.5
    scenario = write_scenario(
        tmp_path,
        {
            "name": "stall",
            "duration": "12s",
            "window": "1s",
            "targets": [tiny_target("tiny", "torchserve-rest", f"http://127.0.0.1:{port}", timeout="20s")],
            "shape": {"kind": "steady", "users": 2},
        },
    )
    stalled = threading.Event()

    def stall_when_busy() -> None:
        wait_until(marker.exists, 60, "the run's first 200 requests")
        os.kill(process.pid, signal.SIGSTOP)
        stalled.set()
        time.sleep(stall_s)  # the length of the stall itself
        os.kill(process.pid, signal.SIGCONT)

    staller = threading.Thread(target=stall_when_busy, daemon=True)
    staller.start()
    run = run_locust(scenario, tmp_path)
    staller.join(timeout=stall_s + 5)

    assert stalled.is_set() and run.returncode == 0, run.output
    rows = run.windows
    counts = [int(r["requests"]) for r in rows]
    busy = [i for i, count in enumerate(counts) if count]
    gap = [i for i in range(busy[0], busy[-1]) if counts[i] == 0]
    assert len(gap) >= 2, counts  # at least two whole windows of the stall, between busy ones
    assert gap == list(range(gap[0], gap[-1] + 1)), counts  # one stretch, not scattered
    for row in (rows[i] for i in gap):
        assert row["rps"] == "0.0" and row["failures"] == "0"
        assert row["p99_ms"] == "" and row["max_ms"] == "" and row["mean_ms"] == ""
    assert run.summary["targets"]["tiny"]["latency_ms"]["max"] > 2000  # the stalled requests waited it out
