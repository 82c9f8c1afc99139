"""Item 13 of `make bench`: the per-request join of the client's and the server's TTFT on a real LLM
server (issue 35's goal: the client − server TTFT residual's p99 at 10 % load ≤ 0.5 ms).

llama.cpp's own server (the `xllamacpp` wheel) serves the built-in LLM on this machine with its 4
slots. First its capacity at this request: a closed loop of 4 users (every slot busy) for
``CAPACITY_S``; then an open loop at ``LOAD_SHARE`` of that rate for ``STEADY_S`` after a warm-up.
Each streamed answer's `usage` tail carries llama.cpp's `timings` (its prefill, `prompt_ms`):
inferload joins them to the client's TTFT request by request (`generation.server`), and the residual
(client TTFT − the server's prefill, floored at 0) is what the client, the loopback and llama.cpp's
own HTTP, tokenizing and scheduling add. A third run, one user in a closed loop (never two requests in
llama.cpp at once), splits it: what is left there is the client's, the loopback's and llama.cpp's
work around a request; what the light load adds beyond it is the new request's wait for the decode
step already running for another (llama.cpp's main loop runs one `llama_decode()` at a time, and
its `timings` start at the prefill). All runs are real `inferload run --headless` processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from inferload.paths import REPO_ROOT

#: the request: a prompt of a few words, this many tokens asked and held
MAX_TOKENS = 16
PROMPT = "The lighthouse keeper wrote in his log that the storm"
USERS = 4
CAPACITY_S, STEADY_S, WARMUP_S = 8, 30, 3
#: the light load's share of the closed loop's rate
LOAD_SHARE = 0.1
#: the goal: the residual's p99 at that load (ms)
GOAL_P99_MS = 0.5


def _run(folder: Path, address: str, shape: dict[str, Any], steady_s: int) -> dict[str, Any]:
    target = {
        "name": "chat",
        "kind": "openai-chat",
        "address": address,
        "model": "random-llama",
        "generation": {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True},
        "timeout": "30s",
    }
    data = {
        "name": folder.name,
        "duration": f"{WARMUP_S + steady_s}s",
        "warmup": f"{WARMUP_S}s",
        "targets": [target],
        "shape": shape,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "inferload.cli", "run", str(folder / "scenario.yaml"), "--headless", "--out", str(folder / "out")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=WARMUP_S + steady_s + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"inferload run {folder.name} exited {done.returncode}: {done.stderr[-1500:]}")
    figures: dict[str, Any] = json.loads((folder / "out" / "summary.json").read_text())["targets"]["chat"]
    return figures


def llm_join(work_dir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Item 13: llama.cpp's capacity at this request, then the join's residual at 10 % of it."""
    from inferload.local.models.llm import LLM_NAME
    from inferload.local.servers.manager import LocalServers, urls
    from inferload.local.servers.ports import ServerPorts

    servers = LocalServers(work_dir / "llm-servers", ServerPorts.free(), models=(LLM_NAME,))
    try:
        servers.up(which=("llamacpp",), timeout_s=120)
        address = urls("llamacpp", servers.ports)["http"]
        saturated = _run(work_dir / "llm-capacity", address, {"kind": "steady", "users": USERS}, CAPACITY_S)
        capacity_rps = float(saturated["throughput_rps"])
        rate = round(LOAD_SHARE * capacity_rps, 2)
        light = _run(work_dir / "llm-light", address, {"kind": "constant-rate", "rate": rate, "max_in_flight": 16}, STEADY_S)
        alone = _run(work_dir / "llm-alone", address, {"kind": "steady", "users": 1}, STEADY_S)
    finally:
        servers.down()
    server = (light.get("generation") or {}).get("server") or {}
    residual = server.get("ttft_residual_ms") or {}
    alone_residual = (((alone.get("generation") or {}).get("server") or {}).get("ttft_residual_ms")) or {}
    result = {
        "max_tokens": MAX_TOKENS,
        "capacity_rps": round(capacity_rps, 2),
        "rate_rps": rate,
        "requests": light["requests"],
        "failures": light["failures"],
        "joined": server.get("generations"),
        "ttft_ms": {k: (light.get("decoupled") or {}).get("first_response_ms", {}).get(k) for k in ("p50", "p99")},
        "prefill_ms": {k: (server.get("prefill_ms") or {}).get(k) for k in ("p50", "p99")},
        "residual_ms": {k: residual.get(k) for k in ("p50", "p90", "p99", "max")},
        "goal_p99_ms": GOAL_P99_MS,
        # one request at a time: the residual with no decode step of another request to wait for
        "one_at_a_time": {
            "rate_rps": round(float(alone["throughput_rps"]), 2),
            "requests": alone["requests"],
            "residual_ms": {k: alone_residual.get(k) for k in ("p50", "p90", "p99", "max")},
        },
    }
    log(
        f"llm join: capacity {result['capacity_rps']} req/s, at {rate} req/s {result['joined']} of {result['requests']} joined,"
        f" TTFT p50 {result['ttft_ms']['p50']} ms, residual p50 {result['residual_ms']['p50']} p99 {result['residual_ms']['p99']} ms;"
        f" one request at a time: residual p50 {alone_residual.get('p50')} p99 {alone_residual.get('p99')} ms"
    )
    return result


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="inferload-llm-join-") as tmp:
        print(json.dumps(llm_join(Path(tmp), print), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
