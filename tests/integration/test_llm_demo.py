"""`inferload demo --llm`: the built-in LLM served three ways on this machine, by the real servers:
llama.cpp's own OpenAI server, Triton's generate extension over a decoupled Python-backend model,
and KServe's OpenAI routes (KServe 0.14.1, its own venv), each over llama.cpp's engine with the same
settings. What is exact: every answer holds the tokens it asked for (the model never ends early) and
every server streams them; the rest is the demo's shape (each server's column, cold start, the
capacity's line and summary.json's bound, the report). Each server's refusal of a request llama.cpp
refuses comes back as the client's error with llama.cpp's reason, streamed or not.
"""

from __future__ import annotations

import csv
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from inferload.local.models.llm import LLM_NAME
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.servermetrics.readers import snapshot
from tests.support.cli import inferload
from tests.support.waiting import wait_until

MAX_TOKENS = 12
SERVERS = ("llamacpp", "triton", "kserve")


@pytest.fixture(scope="module")
def llm_demo(tmp_path_factory: pytest.TempPathFactory, kserve_llm_venv: Path) -> tuple[Any, Path]:
    out = tmp_path_factory.mktemp("llm-demo")
    done = inferload(
        "demo",
        "--llm",
        "--users",
        "2",
        "--warmup",
        "1",
        "--steady",
        "3",
        "--max-tokens",
        str(MAX_TOKENS),
        "--capacity-runs",  # the search's logic is test_capacity's (its truth exact): here, that it runs on each server
        "1",
        "--out",
        str(out),
        timeout_s=400,
    )
    return done, out


def test_the_llm_demo_serves_one_model_three_ways_and_prints_them_side_by_side(llm_demo: tuple[Any, Path]) -> None:
    done, out = llm_demo
    assert done.returncode == 0, done.stdout + done.stderr
    header = next(line for line in done.stdout.splitlines() if "llamacpp.steady" in line and "kserve.steady" in line)
    assert "triton.steady" in header
    for row in ("first response p99 (ms)", "time per output token p99 (ms)", "inter-token p99 (ms)", "goodput (req/s)"):
        assert row in done.stdout
    waiting = next(line for line in done.stdout.splitlines() if "requests waiting in the server" in line)
    assert "llamacpp " in waiting and "triton n/a" not in waiting, waiting  # Triton's page carries its engine's gauges
    assert (out / "report.html").is_file() and (out / "windows.csv").is_file()

    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == LLM_NAME and set(summary["cold_start_s"]) == set(SERVERS)
    for server in SERVERS:
        target = summary["targets"][f"{server}.steady"]
        assert target["failures"] == 0 and target["requests"] > 0, (server, target)
        generation = target["generation"]
        # the tokens asked, every one, counted with the model's own tokenizer on every server
        assert generation["output_tokens_per_request"] == MAX_TOKENS, (server, generation)
        assert generation["goodput"]["attainment_pct"] >= 0 and target["cold_start_s"] > 0
        assert target["decoupled"]["first_response_ms"]["p50"] > 0  # streamed: the first token timed apart
        assert summary["capacity"][server]["bound"] == "goodput >= 90 % (TTFT <= 250 ms, TPOT <= 25 ms)"
        assert summary["capacity"][server]["p99_ms"] is None
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"  {server}: "))
        assert "goodput >= 90 %" in line, line
    assert summary["targets"]["triton.steady"]["server"] == "triton"
    # two users stream on Triton's model: its engine had a request in a slot in every steady window
    rows = [row for row in csv.DictReader((out / "windows.csv").open()) if row["target"] == "triton.steady"]
    running = [float(row["server_running"]) for row in rows if row["phase"] == "steady" and row["server_running"]]
    assert running and max(running) >= 1, rows
    assert summary["targets"]["kserve.steady"]["server"] == "openai"  # KServe's OpenAI routes: an OpenAI target


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def assert_triton_shows_its_engines_slots_and_queue(ports: ServerPorts) -> None:
    """Eight long streams at once on the model's 4 slots: while they run, Triton's page (read by
    inferload's reader, as each window is) says 4 running and 4 waiting; once they end, none."""
    url = f"http://127.0.0.1:{ports.triton_http}/v2/models/{LLM_NAME}/generate_stream"
    body = {"text_input": "a", "parameters": {"max_tokens": 600}}
    streams = [threading.Thread(target=post, args=(url, body)) for _ in range(8)]
    for stream in streams:
        stream.start()
    metrics = f"http://127.0.0.1:{ports.triton_metrics}/metrics"

    def gauges() -> tuple[float | None, float | None]:
        reading = snapshot("triton-generate", f"127.0.0.1:{ports.triton_http}", LLM_NAME, metrics_url=metrics)
        return reading.running, reading.pending

    try:
        wait_until(lambda: gauges() == (4.0, 4.0) or None, 10, "4 running and 4 waiting on Triton's page", interval_s=0.05)
    finally:
        for stream in streams:
            stream.join(timeout=60)
    wait_until(lambda: gauges() == (0.0, 0.0) or None, 10, "none running or waiting once the streams ended")


def test_triton_and_kserve_answer_what_llama_cpp_refuses_with_its_reason(tmp_path: Path, kserve_llm_venv: Path) -> None:
    ports = ServerPorts.free()
    servers = LocalServers(tmp_path / "servers", ports, models=(LLM_NAME,))
    try:
        servers.up(which=("triton", "kserve"), timeout_s=300)
        triton = f"http://127.0.0.1:{ports.triton_http}/v2/models/{LLM_NAME}"
        status, streamed = post(f"{triton}/generate_stream", {"text_input": "a", "parameters": {"max_tokens": 3}})
        assert status == 200 and streamed.count(b'"text_output"') == 3, streamed
        status, whole = post(f"{triton}/generate", {"text_input": "a", "parameters": {"max_tokens": 3, "stream": False}})
        assert status == 200 and len(json.loads(whole)["text_output"].split()) == 3, whole
        status, refused = post(f"{triton}/generate_stream", {"text_input": "a", "parameters": {"max_tokens": 0}})
        assert status == 400 and b"parameter max_tokens is 0; expected a whole number >= 1" in refused, refused
        assert_triton_shows_its_engines_slots_and_queue(ports)

        kserve = f"http://127.0.0.1:{ports.kserve_http}/openai/v1"
        too_long = " ".join(["storm"] * 5000)
        for stream in (True, False):
            status, refused = post(
                f"{kserve}/completions", {"model": LLM_NAME, "prompt": too_long, "max_tokens": 2, "stream": stream}
            )
            assert status == 400 and b"exceeds the available context size" in refused, (stream, refused)
        status, chat = post(
            f"{kserve}/chat/completions", {"model": LLM_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        )
        assert status == 200 and json.loads(chat)["usage"]["completion_tokens"] == 3, chat
    finally:
        servers.down()
