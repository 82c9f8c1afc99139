"""The Inference tab inside Locust's real web UI app (Flask test client, no server): Locust's own
extension points (extended tabs, tables and stats), the JSON route, the chart script; and the GPU
figures read back from InfluxDB's answer."""

from __future__ import annotations

import ast
import fnmatch
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from locust import User, task
from locust.env import Environment

from inferload.measure.run_record import RunRecord
from inferload.observe.sink import SinkSettings
from inferload.webui.live import LiveInputs, inference_stats
from inferload.webui.tab import DASH, NO_INFLUX, NO_POINTS, GpuWatch, InferenceTab, gpu_view, parse_gpu_answer, table_rows
from tests.support.scenario_factory import scenario, tiny_target
from tests.support.system_tools import REPO


class Idle(User):
    @task
    def nothing(self) -> None:
        pass


def tab_app(monkeypatch: pytest.MonkeyPatch) -> tuple[Environment, RunRecord]:
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust's page reads its extra options from the command line
    the_scenario = scenario(
        {"kind": "steady", "users": 1},
        targets=[tiny_target("a", "triton-grpc", "127.0.0.1:8001", slo={"p99_ms": 50})],
        warmup="0s",
    )
    record = RunRecord(window_s=1.0, warmup_s=0.0, started_at=time.time() - 5, targets=("a",))
    for latency in (1.0, 2.0, 3.0):
        record.record("a", latency, False, time.time() - 1)
    environment = Environment(user_classes=[Idle])
    environment.create_local_runner()
    environment.create_web_ui("127.0.0.1", 0, delayed_start=True)

    def inputs() -> LiveInputs:
        return LiveInputs(the_scenario, record, now=time.time(), state="running")

    InferenceTab(environment, inputs).install()
    return environment, record


def test_the_web_ui_gets_a_tab_a_table_and_the_json_route(monkeypatch: pytest.MonkeyPatch):
    environment, record = tab_app(monkeypatch)
    assert environment.web_ui is not None and environment.web_ui.app is not None
    client = environment.web_ui.app.test_client()
    stats = client.get("/inference/stats").get_json()
    assert stats["targets"][0]["latency_ms"] == record.steady["a"].latency_ms()
    page = client.get("/").get_data(as_text=True)
    assert '<script src="./inference/tab.js" defer></script>' in page
    template_args = json.loads(page.split("window.templateArgs = ", 1)[1].split("\n", 1)[0])
    assert template_args["extended_tabs"] == [{"title": "Inference", "key": "inference"}]
    assert template_args["extended_tables"][0]["structure"][4] == {"key": "p99", "title": "p99 (ms, exact)"}
    rows = client.get("/stats/requests").get_json()["extended_stats"]
    assert rows[0]["key"] == "inference" and rows[0]["data"][0]["name"] == "a"
    assert rows[0]["data"][0]["p99"] == "3.00" and rows[0]["data"][0]["slo"] == "pass"
    script = client.get("/inference/tab.js")
    assert script.mimetype == "application/javascript" and b"./inference/stats" in script.data
    csv_text = client.get("/inference/windows.csv").get_data(as_text=True)
    assert csv_text.splitlines()[0] == "target,elapsed_s,phase,requests,rps,p99_ms,target_rps,unsent"
    assert any(line.startswith("a,") and ",3," in line for line in csv_text.splitlines()[1:])


def test_table_cells_show_a_dash_for_figures_not_known():
    the_scenario = scenario({"kind": "steady", "users": 1}, targets=[tiny_target("a", "triton-grpc", "127.0.0.1:8001")])
    record = RunRecord(window_s=1.0, warmup_s=0.0, targets=("a",))
    row = table_rows(inference_stats(LiveInputs(the_scenario, record, now=1.0, state="ready")))[0]
    assert row["p99"] == DASH and row["batch"] == DASH and row["open_loop"] == DASH
    assert row["queue_compute"] == f"{DASH} / {DASH}" and row["slo"] == "no SLO" and row["requests"] == "0"


def test_gpu_figures_are_read_from_the_collectors_points():
    answer = {
        "results": [
            {
                "statement_id": 0,
                "series": [
                    {
                        "name": "gpu",
                        "tags": {"host": "node-b", "gpu": "0", "name": "NVIDIA H100"},
                        "columns": ["time", "util_pct", "mem_used_bytes", "mem_total_bytes"],
                        "values": [[1700000000, 87.0, 40e9, 80e9]],
                    },
                    {
                        "name": "gpu",
                        "tags": {"host": "node-a", "gpu": "1", "name": "NVIDIA H100"},
                        "columns": ["time", "util_pct", "mem_used_bytes", "mem_total_bytes"],
                        "values": [[1700000000, None, 1e9, 80e9]],
                    },
                ],
            }
        ]
    }
    devices = parse_gpu_answer(answer)
    assert [(d["host"], d["gpu"], d["util_pct"]) for d in devices] == [("node-a", "1", None), ("node-b", "0", 87.0)]
    assert gpu_view(devices, None) == {"devices": devices, "why": None}


def test_no_gpu_figures_say_why():
    assert gpu_view(parse_gpu_answer({"results": [{"statement_id": 0}]}), None) == {"devices": None, "why": NO_POINTS}
    assert GpuWatch(None).view == {"devices": None, "why": NO_INFLUX}
    watch = GpuWatch(SinkSettings(url="http://127.0.0.1:9", api="v2", org="o", token="t"))
    watch.read_once()
    assert watch.view["devices"] is None and "InfluxQL" in watch.view["why"]


def test_an_influxql_error_is_a_reason_not_a_crash():
    try:
        parse_gpu_answer({"results": [{"error": "database not found: inferload"}]})
    except ValueError as error:
        assert "database not found" in str(error)
    else:
        raise AssertionError("an InfluxQL error must raise")


def test_the_wheel_carries_the_tab_script():
    """setup.py's package data for inferload.webui matches the script the tab serves."""
    setup_py = ast.parse((REPO / "setup.py").read_text())
    call = next(n for n in ast.walk(setup_py) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    package_data = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "package_data"))
    script = (REPO / "inferload" / "webui" / "static" / "inference.js").relative_to(REPO / "inferload" / "webui").as_posix()
    assert any(fnmatch.fnmatch(script, pattern) for pattern in package_data["inferload.webui"])


def test_the_gpu_watch_reads_the_newest_points_over_influxql():
    """A stand-in InfluxDB on loopback answers /query as InfluxDB 1.x does; the watch shows its GPUs."""
    asked: list[str] = []

    class Influx(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps(
                {
                    "results": [
                        {
                            "statement_id": 0,
                            "series": [
                                {
                                    "name": "gpu",
                                    "tags": {"host": "n1", "gpu": "0", "name": "L4"},
                                    "columns": ["time", "util_pct", "mem_used_bytes", "mem_total_bytes"],
                                    "values": [[1, 55.0, 2e9, 24e9]],
                                }
                            ],
                        }
                    ]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Influx)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        watch = GpuWatch(SinkSettings(url=f"http://127.0.0.1:{server.server_port}", database="metrics"))
        watch.read_once()
    finally:
        server.shutdown()
        server.server_close()
    assert watch.view["why"] is None and watch.view["devices"][0]["util_pct"] == 55.0
    query = parse_qs(urlsplit(asked[0]).query)
    assert query["db"] == ["metrics"] and "FROM gpu" in query["q"][0]
