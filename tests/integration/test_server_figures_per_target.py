"""Server-side figures per target, against the real servers.

- Two targets on one Triton model (gRPC and HTTP, one server): the server counts per model, so both
  get the same figures, read once, marked ``scope: "model"`` and ``shared_with`` the other, in
  summary.json, windows.csv (the same server time per window), the SLO check's note, the console
  table and report.html.
- A third-party TorchServe handler (no metrics of its own): TorchServe's own counters give queue and
  request time; compute time and batch sizes are null with the reason in ``server_side.unknown``.
  Two targets on that model with one metrics page share; a target at a non-default port with no
  ``metrics_url`` gets no figures and a start warning that says why, instead of a guess at :8082.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferload.local.servers.ports import ServerPorts
from tests.support.locust_runner import LocustRun, run_locust
from tests.support.scenario_factory import tiny_target, write_scenario

THIRD_PARTY_MODEL = "bare_number"


def without_marks(side: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in side.items() if key != "shared_with"}


def run_scenario(folder: Path, targets: list[dict[str, Any]]) -> LocustRun:
    data = {"name": "server-figures", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": 4}}
    run = run_locust(write_scenario(folder, data), folder)
    assert run.returncode == 0, run.output
    for name in (t["name"] for t in targets):
        target = run.summary["targets"][name]
        assert target["requests"] > 5 and target["failures"] == 0, (name, target)
    return run


def test_two_targets_on_one_triton_model_get_the_same_figures_marked_shared(local_servers: Any, tmp_path: Path) -> None:
    ports = local_servers.ports
    targets = [
        tiny_target("grpc", "triton-grpc", f"127.0.0.1:{ports.triton_grpc}", slo={"max_queue_ms": 1000}),
        tiny_target("http", "triton-http", f"127.0.0.1:{ports.triton_http}"),
    ]
    run = run_scenario(tmp_path, targets)

    grpc, http = (run.summary["targets"][name]["server_side"] for name in ("grpc", "http"))
    assert grpc["scope"] == http["scope"] == "model"
    assert grpc["shared_with"] == ["http"] and http["shared_with"] == ["grpc"]
    assert without_marks(grpc) == without_marks(http)  # one reading: identical, not merely close
    assert grpc["request_ms_avg"] > 0 and grpc["avg_batch_size"] >= 1 and "unknown" not in grpc
    (check,) = run.summary["slo"]["checks"]
    assert check["passed"] and "all targets of model 'tiny' on this server together (http too)" in check["note"]
    # windows.csv: the same server time per window for both (the model's)
    server_ms: dict[str, dict[str, str]] = {"grpc": {}, "http": {}}
    for row in run.windows:
        if row["server_request_ms"]:
            server_ms[row["target"]][row["window_start"]] = row["server_request_ms"]
    assert server_ms["grpc"] and server_ms["grpc"] == server_ms["http"]
    assert "grpc: server-side figures cover all targets of model 'tiny' on its server together (shared with http)" in run.output
    assert "model-wide, shared with http" in (run.results_dir / "report.html").read_text()


def test_a_third_party_torchserve_handler_gets_torchserves_own_figures_and_the_unknown_explained(
    bare_number_server: ServerPorts, tmp_path: Path
) -> None:
    """The session's ``bare_number_server`` (conftest.py): a handler that adds no metrics of its own."""
    inference = f"http://127.0.0.1:{bare_number_server.ts_inference}"
    page = f"http://127.0.0.1:{bare_number_server.ts_metrics}/metrics"
    targets = [
        tiny_target("bare", "torchserve-rest", inference, metrics_url=page),
        tiny_target("bare-too", "torchserve-rest", inference, metrics_url=page),
        tiny_target("bare-no-page", "torchserve-rest", inference),
    ]
    for target in targets:
        target["model"] = THIRD_PARTY_MODEL  # the archive wraps the sample tiny model
    run = run_scenario(tmp_path, targets)

    bare, too, no_page = (run.summary["targets"][name]["server_side"] for name in ("bare", "bare-too", "bare-no-page"))
    assert bare["request_ms_avg"] > 0 and bare["queue_ms_avg"] is not None and bare["queue_ms_avg"] >= 0
    assert bare["compute_ms_avg"] is None and bare["avg_batch_size"] is None and bare["batch_size_histogram"] is None
    assert set(bare["unknown"]) == {"compute_ms_avg", "avg_batch_size", "batch_size_histogram"}
    assert "PredictionTime" in bare["unknown"]["compute_ms_avg"]
    assert "does not export the sizes of the batches" in bare["unknown"]["avg_batch_size"]
    assert bare["shared_with"] == ["bare-too"] and too["shared_with"] == ["bare"] and without_marks(bare) == without_marks(too)
    # no metrics_url at a non-default port: nothing read, and the start says why
    assert no_page is None
    assert "target 'bare-no-page': no server-side figures: no metrics_url" in run.output
    report = (run.results_dir / "report.html").read_text()
    assert "not reported by this server: TorchServe reports handler time only as gauges" in report
