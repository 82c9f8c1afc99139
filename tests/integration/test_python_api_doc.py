"""docs/python-api.md's hand-written locustfile, run exactly as written against the real local Triton."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.support.locust_runner import python_env
from tests.support.system_tools import REPO

DOC = REPO / "docs" / "python-api.md"
MARKER = "<!-- tests/integration/test_python_api_doc.py runs the next code block as it is -->"


def documented_locustfile() -> str:
    """The Python block right after the marker in the doc."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC}: the marker of the tested example is gone"
    match = re.match(r"\s*```python\n(.*?)```", text.split(MARKER, 1)[1], re.S)
    assert match, f"{DOC}: no ```python block right after the marker"
    return match.group(1)


def test_the_documented_locustfile_mixes_an_inferload_user_with_a_plain_locust_task(local_servers, tmp_path):
    locustfile = tmp_path / "my_locustfile.py"
    locustfile.write_text(documented_locustfile())
    ports = local_servers.ports
    env = {**python_env(), "TRITON_GRPC_ADDRESS": f"127.0.0.1:{ports.triton_grpc}"}
    command = [
        *(sys.executable, "-m", "locust", "-f", str(locustfile)),
        *("--headless", "-u", "4", "-r", "4", "-t", "4s", "--only-summary"),
        *("--host", f"http://127.0.0.1:{ports.triton_http}"),
        *("--json-file", str(tmp_path / "stats"), "--csv", str(tmp_path / "locust")),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {(row["method"], row["name"]): row for row in json.loads((tmp_path / "stats.json").read_text())}
    inference, readiness = rows[("gRPC", "tiny-grpc")], rows[("GET", "/v2/health/ready")]
    assert inference["num_requests"] > 20 and inference["num_failures"] == 0, inference
    assert readiness["num_requests"] > 3 and readiness["num_failures"] == 0, readiness
    csv_names = (tmp_path / "locust_stats.csv").read_text()
    assert "tiny-grpc" in csv_names and "/v2/health/ready" in csv_names
