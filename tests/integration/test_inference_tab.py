"""The web UI's Inference tab in headless Chromium, on real runs against the local Triton and a chat
target streaming from the reference server: a local runner and a master with 2 workers
(`inferload run --workers 2`, web UI on).

Each run starts itself (`--autostart`); the test quits it (SIGINT, as Ctrl-C) once it has read the stopped run. While it runs the tab shows live figures; once it stopped, every figure the page
shows equals `/inference/stats`, and those equal summary.json (exact p99 included). A screenshot of
the tab is saved in the test's tmp folder and its path printed.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from tests.support.locust_runner import locust_command, python_env
from tests.support.ports import free_port
from tests.support.reference_server import reference_server
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.system_tools import HEADLESS_CHROMIUM, REPO
from tests.support.waiting import wait_until

TARGET = "triton-tiny"
CHAT = "chat"
#: how long the stopped run's figures must stay unchanged: a worker's last report after the stop
#: reaches the master within Locust's report interval (3 s); a local runner's are complete at once
SETTLED_S = {0: 0.5, 2: 3.5}
CHROMIUM = [*HEADLESS_CHROMIUM, "--virtual-time-budget=1500"]


def get_stats(base: str, process: subprocess.Popen[str] | None = None) -> dict[str, Any]:
    if process is not None and process.poll() is not None:  # it ended early: say why
        raise AssertionError(f"the run ended (exit {process.returncode}): {process.communicate()[0][-3000:]}")
    with urllib.request.urlopen(base + "/inference/stats", timeout=5) as response:
        return json.loads(response.read())


def chromium(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [*CHROMIUM, f"--user-data-dir={tmp_path / 'chromium'}", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def shown_fields(page: str) -> dict[str, str]:
    """data-field -> data-value of every figure the tab's script drew."""
    return {unescape(f): unescape(v) for f, v in re.findall(r'data-field="([^"]*)" data-value="([^"]*)"', page)}


def json_value(stats: dict[str, Any], field: str) -> Any:
    """The JSON value a data-field names: run.*, slo.state, slo.<target>.<metric>, gpu.*, <target>.<key path>."""
    head, _, rest = field.partition(".")
    if head == "run":
        return stats["run"][rest]
    if head == "slo":
        if rest == "state":
            return stats["slo"]["state"]
        target, _, metric = rest.partition(".")
        return next(c["state"] for c in stats["slo"]["checks"] if c["target"] == target and c["metric"] == metric)
    if head == "gpu":  # no collector on this machine: no devices ("—" and why)
        assert stats["gpu"]["devices"] is None, stats["gpu"]
        return None
    value: Any = next(t for t in stats["targets"] if t["name"] == head)
    for key in rest.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def same(shown: str, value: Any) -> bool:
    if value is None:
        return shown == ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(shown) == float(value)
    return shown == str(value)


def start_run(tmp_path: Path, triton_grpc: int, chat_url: str, workers: int) -> tuple[str, subprocess.Popen[str], Path]:
    scenario = write_scenario(
        tmp_path,
        {
            "name": f"inference-tab-{workers}",
            # a master has figures as its workers report them, every 3 s (Locust's WORKER_REPORT_INTERVAL):
            # its steady phase spans three reports, so the live figures come while it runs on a busy machine
            "duration": "10s" if workers else "4s",
            "warmup": "1s",
            "window": "1s",
            "targets": [
                tiny_target(TARGET, "triton-grpc", f"127.0.0.1:{triton_grpc}", slo={"p99_ms": 1000, "error_rate": 0.5}),
                {"name": CHAT, "kind": "openai-chat", "address": chat_url, "model": "identity", "generation": {"max_tokens": 8}},
            ],
            "shape": {"kind": "steady", "users": 4, "spawn_rate": 100},
        },
    )
    port, results = free_port(), tmp_path / "results"
    # the test quits it with Ctrl-C once it has read the stopped run; --autoquit only if the test cannot
    locust_args = ["--web-port", str(port), "--autostart", "--autoquit", "120"]
    if workers:
        command = [sys.executable, "-m", "inferload.cli", "run", str(scenario), "--workers", str(workers), "--out", str(results)]
        command += ["--", *locust_args]
    else:
        command = locust_command(scenario, "--web-host", "127.0.0.1", "--results-dir", str(results), *locust_args)
    process = subprocess.Popen(command, cwd=REPO, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return f"http://127.0.0.1:{port}", process, results


@pytest.mark.parametrize("workers", [0, 2], ids=["local", "2-workers"])
def test_the_inference_tab_shows_the_runs_exact_figures_live_and_as_summary_json_has_them(local_servers, tmp_path, workers):
    with reference_server(stream_responses=4, generation={"tokens_per_event": 2}, delay={"law": "fixed", "ms": 5}) as chat:
        check_the_tab(local_servers.ports.triton_grpc, chat.http_url, tmp_path, workers)


def check_the_tab(triton_grpc: int, chat_url: str, tmp_path: Path, workers: int) -> None:
    base, process, results = start_run(tmp_path, triton_grpc, chat_url, workers)
    try:
        # live: steady-state figures merged over every worker, with the server's batch figures
        live = wait_until(
            lambda: (
                (s := get_stats(base, process))["run"]["phase"] == "steady"
                and s["targets"][0]["requests"] > 20
                and s["targets"][0]["server_side"] is not None
                and s
            ),
            60,
            "steady figures in /inference/stats",
            interval_s=0.3,
        )
        assert live["run"]["workers"] == max(workers, 1)
        assert live["run"]["final"] is False
        if workers:  # the browser shows the live figures merged over the workers
            shown = shown_fields(chromium(tmp_path, "--dump-dom", base + "/?tab=inference"))
            assert shown["run.phase"] in ("steady", "stopped"), shown
            assert float(shown[f"{TARGET}.latency_ms.p99"]) > 0
            assert float(shown[f"{TARGET}.server_side.avg_batch_size"]) >= 1

        # stopped: wait until the workers' last reports are in (figures unchanged for SETTLED_S)
        seen: dict[str, Any] = {}

        def settled() -> dict[str, Any] | None:
            stats = get_stats(base)
            if not stats["run"]["final"]:
                return None
            if seen.get("stats") != stats:
                seen.update(stats=stats, since=time.monotonic())
                return None
            return stats if time.monotonic() - seen["since"] >= SETTLED_S[workers] else None

        final = wait_until(settled, 60, "the stopped run's figures to settle", interval_s=0.5)
        screenshot = tmp_path / f"inference-tab-{workers or 'local'}.png"
        page = chromium(tmp_path, "--window-size=1400,1400", f"--screenshot={screenshot}", "--dump-dom", base + "/?tab=inference")
        print(f"screenshot of the Inference tab: {screenshot}")
        assert screenshot.stat().st_size > 10_000
        assert "Inference" in page and 'data-chart="batch sizes"' in page  # Locust's tab, our charts
        assert 'data-chart="output tokens per window (tok/s)"' in page
        shown = shown_fields(page)
        assert shown["run.phase"] == "stopped"
        assert final["gpu"]["why"] in unescape(page)  # "—" with why, not a blank
        for field, value in shown.items():
            assert same(value, json_value(final, field)), (field, value, json_value(final, field))
        wanted = ["latency_ms.p50", "latency_ms.p95", "latency_ms.p99", "throughput_rps", "server_side.avg_batch_size"]
        assert {f"{TARGET}.{key}" for key in wanted} <= set(shown)
        tokens = ["decoupled.first_response_ms.p99", "generation.tpot_ms.p50", "generation.output_tokens_per_s"]
        assert {f"{CHAT}.{key}" for key in tokens} <= set(shown)
        process.send_signal(signal.SIGINT)  # Ctrl-C quits the web UI: the results are written as it quits
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    # the run had ended: the Ctrl-C that quits the web UI is no interruption, local or with workers (docs/operations.md)
    assert process.returncode == 0, output[-3000:]

    summary = json.loads((results / "summary.json").read_text())
    mine, tab = summary["targets"][TARGET], final["targets"][0]
    assert summary["workers"] == max(workers, 1)
    assert summary.get("interrupted") is not True  # the run had ended: quitting is not an interruption
    assert tab["latency_ms"] == mine["latency_ms"]  # exact percentiles, p99 included: the same histograms
    for key in ("requests", "failures", "error_rate", "throughput_rps", "server_side", "residual_ms"):
        assert tab[key] == mine[key], key
    chat_tab = next(t for t in final["targets"] if t["name"] == CHAT)
    for key in ("generation", "decoupled"):  # the engine's token figures, merged over the workers
        assert chat_tab[key] == summary["targets"][CHAT][key], key
    assert [(c["metric"], c["passed"], c["value"]) for c in final["slo"]["checks"]] == [
        (c["metric"], c["passed"], c["value"]) for c in summary["slo"]["checks"]
    ]
    assert {c["state"] for c in final["slo"]["checks"]} == {"pass"}
