"""docs/python-api.md's hand-written locustfiles, each run exactly as written (`locust -f`, headless,
short) against the real local Triton: their exit codes, Locust's statistics and summary.json."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.locust_runner import python_env
from tests.support.system_tools import REPO

DOC = REPO / "docs" / "python-api.md"
MARKER = "<!-- tests/integration/test_python_api_doc.py runs the next code block as it is: {} -->"


def documented_locustfile(name: str) -> str:
    """The Python block right after the marker ``name`` in the doc."""
    text = DOC.read_text()
    marker = MARKER.format(name)
    assert marker in text, f"{DOC}: the marker of the tested example {name!r} is gone"
    match = re.match(r"\s*```python\n(.*?)```", text.split(marker, 1)[1], re.S)
    assert match, f"{DOC}: no ```python block right after the marker {name!r}"
    return match.group(1)


def run_documented(
    name: str, folder: Path, env: dict[str, str], *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The block as ``folder/<name>.py``, run headless in ``folder``: Locust's result and the summary attach wrote."""
    locustfile = folder / f"{name.replace('-', '_')}.py"
    locustfile.write_text(documented_locustfile(name))
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary", *flags]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    summaries = list((folder / "results").glob("*/summary.json"))
    assert len(summaries) == 1, (summaries, done.stdout + done.stderr)
    return done, json.loads(summaries[0].read_text())


def test_the_documented_inferload_users_with_tasks_of_their_own_next_to_a_plain_locust_task(local_servers, tmp_path):
    ports = local_servers.ports
    env = {**python_env(), "TRITON_GRPC_ADDRESS": f"127.0.0.1:{ports.triton_grpc}"}
    done, summary = run_documented(
        "inferload-users",
        tmp_path,
        env,
        *("-u", "6", "-r", "6", "-t", "4s", "--host", f"http://127.0.0.1:{ports.triton_http}"),
        *("--json-file", str(tmp_path / "stats"), "--csv", str(tmp_path / "locust")),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {(row["method"], row["name"]): row for row in json.loads((tmp_path / "stats.json").read_text())}
    grpc, http, readiness = rows[("gRPC", "tiny-grpc")], rows[("HTTP", "tiny-http")], rows[("GET", "/v2/health/ready")]
    assert grpc["num_requests"] > 20 and grpc["num_failures"] == 0, grpc
    assert http["num_requests"] > 10 and http["num_failures"] == 0, http  # its own tasks, to the address --host gave
    assert readiness["num_requests"] > 3 and readiness["num_failures"] == 0, readiness
    targets = summary["targets"]
    assert set(targets) == {"tiny-grpc", "tiny-http", "/v2/health/ready"}
    assert (targets["tiny-grpc"]["kind"], targets["tiny-http"]["kind"]) == ("triton-grpc", "triton-http")
    assert targets["tiny-http"]["model"] == "tiny" and targets["tiny-http"]["requests"] > 0
    assert (targets["/v2/health/ready"]["server"], targets["/v2/health/ready"]["protocol"]) == ("locust", "GET")
    (check,) = [c for c in summary["slo"]["checks"] if c["metric"] == "p99_ms"]
    assert check["target"] == "tiny-grpc" and check["passed"] is True
    side = targets["tiny-grpc"]["server_side"]  # Triton's own figures, read for the targets attach knows
    assert side["shared_with"] == ["tiny-http"] and side["avg_batch_size"] >= 1  # one model of one server: read once


def test_the_documented_plain_locust_locustfile_with_attach(local_servers, tmp_path):
    ports = local_servers.ports
    done, summary = run_documented(
        "attach-plain-locust",
        tmp_path,
        python_env(),
        *("-u", "4", "-r", "4", "-t", "4s", "--host", f"http://127.0.0.1:{ports.triton_http}"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary["scenario"] == "attach_plain_locust" and summary["warmup_s"] == 1
    (entry,) = summary["targets"].values()
    assert (entry["server"], entry["protocol"], entry["model"], "kind" in entry) == ("locust", "POST", "", False)
    assert entry["requests"] > 10 and entry["failures"] == 0
    assert 0 < entry["latency_ms"]["p50"] <= entry["latency_ms"]["p99"] <= entry["latency_ms"]["max"]
    assert summary["slo"]["passed"] is True and {c["metric"] for c in summary["slo"]["checks"]} == {"p99_ms", "error_rate"}
    assert "inferload results" in done.stdout  # the console table
