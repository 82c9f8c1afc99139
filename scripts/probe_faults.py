"""Issue 24's probe of faults mid-run and rogue peers (not a test: a check of many runs, minutes long).

Signals at varied moments on local and distributed runs (SIGINT, SIGTERM, SIGHUP, SIGKILL, two SIGINTs)
and on tune against Triton and TorchServe, a traced run killed outright, rogue ZeroMQ peers on a master
port (malformed and forged messages, raw garbage). Each check: no traceback, no hang, results where
docs/operations.md promises them, nothing left running, the servers as found. It starts its own Triton
and TorchServe on free loopback ports and stops them. One line per check, then a tally:

    PYTHONPATH=. .venv/bin/python scripts/probe_faults.py [WORK_FOLDER] [runs,rogues,tune,traced]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import locust  # noqa: F401  (patches the standard library first, as tests/conftest.py does)
import psutil

from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.triton_local import trace_arguments
from inferload.run.server_changes import ServerJournal
from tests.integration.test_servers_left_as_found import (
    SEARCH,
    first_step_running,
    get,
    no_process_mentions,
    registration,
    trace_settings,
    traced_scenario,
)
from tests.support.example_triton import example_triton
from tests.support.locust_runner import python_env
from tests.support.ports import free_port
from tests.support.rogue_worker import EMPTY_LOCUST_STATS, RogueWorker
from tests.support.scenario_factory import cnn_target, tiny_target, write_scenario
from tests.support.system_tools import REPO

WORK = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/probe/work")
WORK.mkdir(parents=True, exist_ok=True)
results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    results.append((name, ok, detail))
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)


def env(journal: Path, **extra: str) -> dict[str, str]:
    return {**python_env(), "INFERLOAD_JOURNAL_DIR": str(journal), **extra}


def start(args: list[str], journal: Path, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "inferload.cli", *args],
            cwd=REPO,
            env=env(journal, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def restore(journal: Path) -> subprocess.CompletedProcess[str]:
    """`inferload restore` of that journal."""
    command = [sys.executable, "-m", "inferload.cli", "restore"]
    return subprocess.run(command, cwd=REPO, env=env(journal), capture_output=True, text=True, timeout=180)


def settle(text: str, timeout_s: float = 30) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if no_process_mentions(text):
            return True
        time.sleep(0.5)
    return False


def common(name: str, process: subprocess.Popen[bytes], log: Path, out: Path, timeout_s: float = 120) -> int | None:
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        check(f"{name}: no hang", False, f"still running {timeout_s:g} s after the signal")
        return None
    text = log.read_text(errors="replace")
    check(
        f"{name}: no traceback", "Traceback" not in text, "" if "Traceback" not in text else text[text.index("Traceback") :][:400]
    )
    check(f"{name}: nothing left running", settle(str(out)))
    return code


def summary_state(out: Path) -> str:
    path = out / "summary.json"
    if not path.exists():
        found = list(out.rglob("summary.json"))
        if not found:
            return "none"
        path = found[0]
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        return f"broken: {error}"
    return "interrupted" if data.get("interrupted") else "complete"


def probe_runs(ports: ServerPorts) -> None:
    target = tiny_target("t", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}")
    data = {"name": "p", "duration": "20s", "warmup": "3s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    scenario = write_scenario(WORK, data, "run.yaml")
    cases = []
    for workers in ([], ["--workers", "2"]):
        for sig, at in ((signal.SIGINT, 6), (signal.SIGTERM, 12), (signal.SIGHUP, 9), (signal.SIGINT, 17), (signal.SIGTERM, 4)):
            cases.append((workers, [sig], at))
        cases.append((workers, [signal.SIGKILL], 10))
        cases.append((workers, [signal.SIGINT, signal.SIGINT], 10))
    for number, (workers, sigs, at) in enumerate(cases):
        name = f"run{' --workers 2' if workers else ''} {'+'.join(s.name for s in sigs)} at {at}s"
        folder = WORK / f"run-{number}"
        out = folder / "results"
        folder.mkdir(exist_ok=True)
        log = folder / "log"
        process = start(["run", str(scenario), "--headless", "--out", str(out), *workers], folder / "journal", log)
        time.sleep(at)
        for s in sigs:
            process.send_signal(s)
            time.sleep(0.3)
        if sigs == [signal.SIGKILL]:
            common(name, process, log, out)
            state = "none"
            end = time.monotonic() + 40
            while time.monotonic() < end and (state := summary_state(out)) == "none":
                time.sleep(1)
            check(f"{name}: results kept (Locust gets SIGHUP, writes them)", state == "interrupted", state)
            continue
        code = common(name, process, log, out)
        if code is None:
            continue
        text = log.read_text(errors="replace")
        state = summary_state(out)
        if len(sigs) == 2:
            check(f"{name}: exits at once 130", code == 130, f"exit {code}")
            continue
        expected = 128 + sigs[0]
        before_start = "before the run started" in text
        check(f"{name}: exit {expected}", code == expected, f"exit {code}")
        check(
            f"{name}: results written interrupted (or 'before the run started')",
            state == "interrupted" or (before_start and state == "none"),
            f"{state}",
        )


def probe_tune(ports: ServerPorts) -> None:
    triton_url = f"http://127.0.0.1:{ports.triton_http}"
    management = f"http://127.0.0.1:{ports.ts_management}"
    servers = {
        "triton": (
            cnn_target("triton", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}"),
            ["--triton-url", triton_url, "--triton-delays-us", "2000"],
            lambda: get(f"{triton_url}/v2/models/cnn/config"),
        ),
        "torchserve": (
            cnn_target("torchserve", "torchserve-rest", f"127.0.0.1:{ports.ts_inference}"),
            ["--torchserve-management", management],
            lambda: registration(management),
        ),
    }
    cases = [
        ("triton", [signal.SIGINT], 3),
        ("triton", [signal.SIGTERM], None),
        ("triton", [signal.SIGKILL], 25),
        ("triton", [signal.SIGINT, signal.SIGINT], None),
        ("torchserve", [signal.SIGTERM], 5),
        ("torchserve", [signal.SIGINT], None),
        ("torchserve", [signal.SIGKILL], None),
        ("torchserve", [signal.SIGHUP], 15),
    ]
    for number, (server, sigs, at) in enumerate(cases):
        target, options, read = servers[server]
        before = read()
        folder = WORK / f"tune-{number}"
        folder.mkdir(exist_ok=True)
        journal = folder / "journal"
        scenario = write_scenario(
            folder, {"name": "tune", "duration": "30s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
        )
        out = folder / "out"
        args = ["tune", str(scenario), "--servers", server, "--out", str(out), *SEARCH, *options]
        name = f"tune {server} {'+'.join(s.name for s in sigs)} at {'first step' if at is None else f'{at}s'}"
        log = folder / "log"
        process = start(args, journal, log)
        if at is None:
            end = time.monotonic() + 120
            while time.monotonic() < end and not first_step_running(out):
                time.sleep(0.5)
            time.sleep(2)
        else:
            time.sleep(at)
        for s in sigs:
            process.send_signal(s)
            time.sleep(0.2)
        code = common(name, process, log, out, timeout_s=150)
        if code is None:
            continue
        if sigs[0] == signal.SIGKILL or len(sigs) == 2:
            restored = restore(journal)
            check(f"{name}: restore exits 0", restored.returncode == 0, f"exit {restored.returncode} {restored.stderr[-200:]}")
        else:
            expected = 128 + sigs[0]
            check(f"{name}: exit {expected}", code == expected, f"exit {code}")
            state = "none"
            if (out / "tune.json").exists():
                state = json.loads((out / "tune.json").read_text()).get("stopped") or "complete"
            text = log.read_text(errors="replace")
            check(
                f"{name}: tune.json says interrupted (or stopped before start)",
                state == "interrupted" or ("while starting" in text and state == "none"),
                state,
            )
        check(f"{name}: server as found", read() == before)
        check(f"{name}: journal empty", ServerJournal(journal).entries() == [])


def probe_traced_kill() -> None:
    work = WORK / "traced"
    work.mkdir(exist_ok=True)
    with example_triton(work, {"tail_queue": "tail_queue"}, *trace_arguments(work / "trace.json")) as server:
        before = trace_settings(server)
        journal = work / "journal"
        scenario = traced_scenario(work, server, "30s", {"rate": 0.5})
        log = work / "log"
        process = start(["run", str(scenario), "--headless", "--out", str(work / "results")], journal, log)
        end = time.monotonic() + 60
        while time.monotonic() < end and trace_settings(server) == before:
            time.sleep(0.5)
        changed = trace_settings(server) != before
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the CLI and every Locust process: nothing can put it back
        for left in psutil.process_iter(["cmdline", "pid"]):  # Locust runs in a session of its own
            if any(str(work / "results") in part for part in left.info["cmdline"] or ()):
                left.kill()
        process.wait(timeout=30)
        settle(str(work / "results"))
        check("traced run killed outright: tracing was on", changed)
        restored = restore(journal)
        check(
            "traced run killed outright: restore exits 0",
            restored.returncode == 0,
            restored.stdout[-200:] + restored.stderr[-200:],
        )
        check("traced run killed outright: trace settings as found", trace_settings(server) == before)


def probe_rogues(ports: ServerPorts) -> None:
    target = tiny_target("t", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}")
    data = {"name": "p", "duration": "15s", "warmup": "2s", "targets": [target], "shape": {"kind": "steady", "users": 2}}
    scenario = write_scenario(WORK, data, "rogue.yaml")
    forged_total = {**EMPTY_LOCUST_STATS["stats_total"], "num_requests": 100, "num_failures": 100}
    attacks = {
        "heartbeat without data": lambda r: r.send("heartbeat", None),
        "forged failing stats": lambda r: r.send("stats", {**EMPTY_LOCUST_STATS, "stats_total": forged_total}),
        "exception message": lambda r: r.send("exception", {"msg": "x", "traceback": "y"}),
        "quit": lambda r: r.send("quit", None),
        "client_stopped": lambda r: r.send("client_stopped", None),
    }
    for number, (kind, attack) in enumerate(attacks.items()):
        folder = WORK / f"rogue-{number}"
        folder.mkdir(exist_ok=True)
        port, out, log = free_port(), folder / "results", folder / "log"
        process = start(
            ["run", str(scenario), "--headless", "--workers", "1", "--master-port", str(port), "--out", str(out)],
            folder / "journal",
            log,
        )
        time.sleep(5)
        rogues = []
        try:
            for _ in range(3):
                rogue = RogueWorker("127.0.0.1", port)
                rogues.append(rogue)
                rogue.say_ready()
                attack(rogue)
            for _ in range(20):  # raw garbage on the port as well
                with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                    raw.sendall(os.urandom(512))
        except OSError as error:
            print("  (rogue connection:", error, ")")
        finally:
            for rogue in rogues:
                rogue.close()
        name = f"rogue peer ({kind})"
        code = common(name, process, log, out, timeout_s=90)
        if code is None:
            continue
        state = summary_state(out)
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        failures = (
            sum(t.get("failures", 0) for t in summary.get("targets", {}).values())
            if isinstance(summary.get("targets"), dict)
            else None
        )
        check(
            f"{name}: run completes with exit 0",
            code == 0 and state == "complete",
            f"exit {code}, summary {state}, failures {failures}",
        )


def main() -> None:
    ports = ServerPorts.free()
    servers = LocalServers(WORK / "servers", ports, ("tiny", "cnn"))
    servers.up(timeout_s=240)
    try:
        which = sys.argv[2].split(",") if len(sys.argv) > 2 else ["runs", "rogues", "tune", "traced"]
        probes = {"runs": lambda: probe_runs(ports), "rogues": lambda: probe_rogues(ports), "tune": lambda: probe_tune(ports)}
        probes["traced"] = probe_traced_kill
        for name in which:
            probes[name]()
    finally:
        servers.down()
    failed = [r for r in results if not r[1]]
    print(f"\n{len(results)} checks, {len(failed)} failed")
    for name, _, detail in failed:
        print("FAILED:", name, detail)


main()
