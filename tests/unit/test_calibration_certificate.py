"""calibration.json (`inferload.results.calibration`): its reader, where the latest lives, the
roofline from case results, and the run's start warning (`inferload.results.calibration`)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from inferload.calibrate.command import roofline_of
from inferload.calibrate.runner import plan
from inferload.errors import ConfigFileError
from inferload.results import calibration as calibration_module
from inferload.results.calibration import (
    Bounds,
    Calibration,
    CaseResult,
    PercentileError,
    Roofline,
    calibration_at_start,
    default_calibration_path,
    latest_calibration,
    latest_calibration_path,
    machine_user_key,
    peak_rate_rps,
    read_calibration,
)
from inferload.users.engine import RECEIVE_SHIFT_ENV, receive_shift_us
from tests.support.scenario_factory import bare_target, scenario, tiny_target


def case(protocol: str, rate: float | None, within: bool, processes: int = 1) -> CaseResult:
    p = PercentileError(measured_ms=2.1, true_ms=2.0, error_us=100.0, error_pct=5.0, within=within)
    return CaseResult(
        name=f"{protocol}-{rate}",
        protocol=protocol,
        target_kind=f"kserve-v2-{protocol}",
        loop="closed" if rate is None else "open",
        law_name="fixed",
        law={"law": "fixed", "ms": 2.0},
        users=8 if rate is None else None,
        configured_rps=rate,
        processes=processes,
        requests=100,
        server_records=100,
        failures=0,
        throughput_rps=rate or 500.0,
        percentiles={k: p for k in ("p50", "p90", "p99", "p999")},
        achieved_rps=rate,
        rate_error_pct=0.0 if rate else None,
        send_lag_ms={"p50": 0.01, "p99": 0.05, "max": 0.1} if rate else None,
        unsent=0 if rate else None,
        cpu_us_per_request=40.0,
        within_bounds=within,
        misses=[] if within else ["p99 off"],
    )


def certificate(
    grpc_roofline: float | None = 400.0, transport: str = "native", tested: tuple[float, ...] = (100, 400, 800)
) -> Calibration:
    roof = Roofline(
        rps_per_process=grpc_roofline,
        first_failing_rps_per_process=800.0,
        tested_rps_per_process=list(tested),
        ceiling_rps_per_process=2000.0,
    )
    return Calibration(
        schema_="inferload-calibration/1",
        created_at="2026-12-01T12:00:00+00:00",
        elapsed_s=50.0,
        quick=True,
        transport=transport,
        processes=1,
        machine={"hostname": "h", "cpus": 2},
        versions={"python": "3.11"},
        bounds=Bounds(),
        floor={"fixed": {"grpc": {"samples": 300, "p50_us": 60.0, "p90_us": 80.0, "p99_us": 120.0}}, "method": {"text": "probe"}},
        cases=[case("grpc", 400.0, True)],
        roofline={"grpc": roof, "http": roof.model_copy(update={"rps_per_process": 300.0})},
        goals=[],
    )


def test_a_certificate_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(certificate().to_json())
    data = json.loads(path.read_text())
    assert data["schema"] == "inferload-calibration/1" and "schema_" not in data
    read = read_calibration(path)
    assert read == certificate()
    assert read.roofline_rps_per_process("grpc") == 400.0 and read.roofline_rps_per_process("http") == 300.0
    assert read.roofline_rps_per_process("other") is None
    assert read.floor_of("fixed", "grpc") == {"samples": 300, "p50_us": 60.0, "p90_us": 80.0, "p99_us": 120.0}
    assert read.floor_of("none", "grpc") is None


def test_a_bad_certificate_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    data: dict[str, Any] = json.loads(certificate().to_json())
    path.write_text(json.dumps({**data, "schema": "inferload-calibration/2"}))
    with pytest.raises(ConfigFileError, match=r"calibration.json: schema: expected 'inferload-calibration/1'"):
        read_calibration(path)
    del data["roofline"]
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigFileError, match=r"calibration.json: roofline: Field required"):
        read_calibration(path)
    path.write_text("{")
    with pytest.raises(ConfigFileError, match="expected JSON"):
        read_calibration(path)


def test_the_latest_certificate_is_named_by_the_environment_or_lives_in_the_home(tmp_path: Path) -> None:
    assert default_calibration_path({"INFERLOAD_HOME": str(tmp_path)}) == tmp_path / "calibration.json"
    mine = Path(f"/home/u/.cache/inferload/calibration/{machine_user_key()}/calibration.json")
    assert default_calibration_path({"HOME": "/home/u"}) == mine
    assert latest_calibration_path({"INFERLOAD_CALIBRATION": "none", "INFERLOAD_HOME": str(tmp_path)}) is None
    assert latest_calibration({"INFERLOAD_HOME": str(tmp_path)}) is None  # none written yet: nothing applies
    (tmp_path / "calibration.json").write_text(certificate().to_json())
    found = latest_calibration({"INFERLOAD_HOME": str(tmp_path)})
    assert found is not None and found[0] == tmp_path / "calibration.json"
    with pytest.raises(ConfigFileError, match=r"missing\.json: does not exist$"):  # a file named outright must exist
        latest_calibration({"INFERLOAD_CALIBRATION": str(tmp_path / "missing.json")})


def test_the_roofline_is_the_highest_rate_below_the_first_miss() -> None:
    results = [
        case("grpc", None, False),
        case("grpc", 800.0, True),
        case("grpc", 100.0, True),
        case("grpc", 400.0, False),
        case("http", 200.0, False),
        case("grpc", 1600.0, True, processes=2),
    ]
    roof = roofline_of(results, "grpc", 2000.0)
    # 800/1 passed but came after the miss at 400: the roofline is contiguous from the lowest rate
    assert roof.rps_per_process == 100.0 and roof.first_failing_rps_per_process == 400.0
    assert roof.tested_rps_per_process == [100.0, 400.0, 800.0, 800.0] and roof.ceiling_rps_per_process == 2000.0
    http = roofline_of(results, "http", None)
    assert http.rps_per_process is None and http.first_failing_rps_per_process == 200.0


def test_a_run_above_the_roofline_is_warned_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "calibration.json").write_text(certificate().to_json())
    env = {"INFERLOAD_HOME": str(tmp_path)}
    fast = scenario({"kind": "constant-rate", "rate": 1000}, targets=[tiny_target("t", "triton-grpc", "127.0.0.1:8001")])
    with caplog.at_level(logging.WARNING, logger="inferload.results.calibration"):
        applied = calibration_at_start(fast, processes=1, transport="native", environ=env)
    assert applied is not None and applied["above_roofline"] == ["grpc"] and applied["configured_rps_per_process"] == 1000.0
    assert "the generator, not the server, would be the limit at this rate: add workers" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="inferload.results.calibration"):  # three processes share it: below
        applied = calibration_at_start(fast, processes=3, transport="native", environ=env)
    assert applied is not None and applied["above_roofline"] == [] and not caplog.text
    closed = scenario({"kind": "steady", "users": 64})
    assert peak_rate_rps(closed.shape) is None
    with caplog.at_level(logging.WARNING, logger="inferload.results.calibration"):
        applied = calibration_at_start(closed, processes=1, transport="python", environ=env)
    assert applied is not None and applied["configured_rps_per_process"] is None
    assert "certified the native transport; this run uses the python transport" in caplog.text
    assert calibration_at_start(fast, 1, "native", {"INFERLOAD_HOME": str(tmp_path / "empty")}) is None


def test_the_latest_certificate_in_the_home_is_kept_per_machine_and_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home shared by machines, or a cache shared by users: one's certificate never applies to another."""
    env = {"HOME": str(tmp_path)}
    here = default_calibration_path(env)
    assert here.parent.parent == tmp_path / ".cache" / "inferload" / "calibration"
    assert here.parent.name == machine_user_key() == f"{calibration_module.socket.gethostname()}-{os.getuid()}"
    monkeypatch.setattr(calibration_module.socket, "gethostname", lambda: "other/host")
    elsewhere = default_calibration_path(env)
    assert elsewhere.parent.name == f"other_host-{os.getuid()}" and elsewhere != here  # one folder name, never a path
    monkeypatch.setattr(calibration_module.os, "getuid", lambda: 4242)
    assert default_calibration_path(env).parent.name == "other_host-4242"
    # the place before certificates were kept per machine and user is not read: calibrate again
    (tmp_path / ".cache" / "inferload").mkdir(parents=True)
    (tmp_path / ".cache" / "inferload" / "calibration.json").write_text(certificate().to_json())
    assert latest_calibration(env) is None


MALFORMED = {
    "nested too deep": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    "nested, another shape": ('{"a": {"b": ' + "[" * 5000 + "]" * 5000 + "}}", "nested too deep"),
    "another shape": (json.dumps({"a": {"b": [[[1]]]}}), "schema: expected 'inferload-calibration/1'"),
    "wrong types": (
        certificate().to_json().replace('"rps_per_process": 400.0', '"rps_per_process": "fast"'),
        "roofline.grpc.rps_per_process: Input should be a valid number",
    ),
    "many wrong items": (
        json.dumps({**json.loads(certificate().to_json()), "cases": [1] * 5000}),
        "cases.0: Input should be a valid dictionary or instance of CaseResult; cases.1: ",
    ),
    "too large": (json.dumps({**json.loads(certificate().to_json()), "pad": "x" * 2_000_000}), "at most 1,048,576 are read"),
}


@pytest.mark.parametrize("name", [*MALFORMED, "a FIFO", "a folder"])
def test_a_malformed_certificate_is_one_warning_line_and_the_run_goes_on_uncalibrated(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calibration.json"
    if name == "a FIFO":
        os.mkfifo(path)
        expected = "is not a regular file: it is a named pipe (FIFO)"
    elif name == "a folder":
        path.mkdir()
        expected = "is not a regular file: it is a folder"
    else:
        text, expected = MALFORMED[name]
        path.write_text(text)
    fast = scenario({"kind": "constant-rate", "rate": 1000}, targets=[tiny_target("t", "triton-grpc", "127.0.0.1:8001")])
    with caplog.at_level(logging.INFO, logger="inferload.results.calibration"):
        applied = calibration_at_start(fast, processes=1, transport="native", environ={"INFERLOAD_HOME": str(tmp_path)})
    assert applied is None
    [record] = caplog.records
    line = record.getMessage()
    assert record.levelno == logging.WARNING and "\n" not in line and len(line) < 1000, line
    assert line.startswith(f"the calibration certificate cannot be used: {path}: ") and expected in line, line
    assert line.endswith(": this run goes on uncalibrated")


def test_open_loop_cases_test_fixed_low_rates_whatever_the_ceiling() -> None:
    """A fast machine's 10 % of the ceiling (5,400 req/s) would leave the rates most runs use untested."""
    quick, full = plan(quick=True), plan(quick=False)
    assert quick.open_rates_rps(54_000.0, processes=1) == [50.0, 200.0, 5400.0]
    assert full.open_rates_rps(54_000.0, processes=1) == [50.0, 200.0, 5400.0, 13_500.0, 27_000.0, 43_200.0]
    assert quick.open_rates_rps(54_000.0, processes=2) == [100.0, 400.0, 10_800.0]  # per process, times the processes
    assert quick.open_rates_rps(1000.0, processes=1) == [50.0, 100.0, 200.0]  # a slow machine: lowest first
    assert quick.open_rates_rps(500.0, processes=1) == [50.0, 200.0]  # 10 % is 50 req/s: tested once


def test_the_certificate_names_the_lowest_rate_tested() -> None:
    roof = roofline_of([case("grpc", 400.0, False), case("grpc", 50.0, False), case("grpc", None, True)], "grpc", 2000.0)
    assert roof.lowest_tested_rps_per_process == 50.0 and roof.rps_per_process is None
    assert json.loads(roof.model_dump_json())["lowest_tested_rps_per_process"] == 50.0
    assert roofline_of([case("grpc", None, True)], "grpc", 2000.0).lowest_tested_rps_per_process is None
    older = certificate(tested=(200, 400))  # written before the key: read from the tested rates
    assert older.roofline["grpc"].lowest_tested_rps_per_process is None
    assert older.lowest_tested_rps_per_process("grpc") == 200 and older.lowest_tested_rps_per_process("other") is None


def test_a_rate_below_the_lowest_tested_is_said_once_and_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not tested is not measured: no warning as if the rate had missed a bound; one line says so."""
    (tmp_path / "calibration.json").write_text(certificate(grpc_roofline=None, tested=(50, 200)).to_json())
    env = {"INFERLOAD_HOME": str(tmp_path)}
    targets = [tiny_target("g", "triton-grpc", "127.0.0.1:8001"), tiny_target("h", "triton-http", "127.0.0.1:8000")]
    slow = scenario({"kind": "constant-rate", "rate": 20}, targets=targets)
    with caplog.at_level(logging.INFO, logger="inferload.results.calibration"):
        applied = calibration_at_start(slow, processes=1, transport="native", environ=env)
    assert applied is not None and applied["above_roofline"] == []
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert (
        "tested no rate as low as this run's 20 req/s per process (grpc from 50 req/s per process up, "
        "http from 50 req/s per process up): figures at this rate are not certified, nor warned about"
    ) in record.getMessage()
    caplog.clear()
    tested = scenario({"kind": "constant-rate", "rate": 100}, targets=targets[:1])  # tested, and every rate missed
    with caplog.at_level(logging.INFO, logger="inferload.results.calibration"):
        calibration_at_start(tested, processes=1, transport="native", environ=env)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "certifies no grpc rate on this machine (every tested rate from 50 req/s per process up missed a bound)" in (
        record.getMessage()
    )


def test_the_receive_shift_is_whole_microseconds_or_nothing() -> None:
    assert receive_shift_us({RECEIVE_SHIFT_ENV: "200"}) == 200
    assert receive_shift_us({}) == 0
    assert receive_shift_us({RECEIVE_SHIFT_ENV: "-5"}) == 0 and receive_shift_us({RECEIVE_SHIFT_ENV: "x"}) == 0


def test_a_bad_calibrate_option_exits_2_naming_it() -> None:
    from tests.support.cli import inferload

    done = inferload("calibrate", "--protocols", "grpc,udp", timeout_s=60)
    assert done.returncode == 2 and "--protocols: expected a comma list of grpc, http; got 'grpc,udp'" in done.stderr
    done = inferload("calibrate", "--bound-us", "-1", timeout_s=60)
    assert done.returncode == 2 and "--bound-us: expected 0 or more" in done.stderr


def test_a_capacity_search_offers_no_rate_above_the_roofline_of_its_targets_protocol(tmp_path: Path) -> None:
    """`sweep`/`tune --calibration`: the certificate `inferload calibrate` writes, read by its one reader;
    the roofline of the loaded target's protocol (the lowest of the scenario's without --target) x processes."""
    from inferload.tune.sweep_cli import generator_ceiling_rps
    from tests.support.scenario_factory import steady_one_user, write_scenario

    path = tmp_path / "calibration.json"
    path.write_text(certificate(grpc_roofline=400.0).to_json())  # http: 300
    grpc, http = bare_target("g", "triton-grpc", "127.0.0.1:1"), bare_target("h", "triton-http", "127.0.0.1:1")
    both = write_scenario(tmp_path, steady_one_user(grpc, http))
    assert generator_ceiling_rps(path, 2, both, "g") == 800.0
    assert generator_ceiling_rps(path, 3, both, "h") == 900.0
    assert generator_ceiling_rps(path, 1, both) == 300.0
    assert generator_ceiling_rps(None, 1, both) is None


def test_a_certificate_that_certifies_no_rate_for_the_protocol_is_refused_by_a_search(tmp_path: Path) -> None:
    from inferload.errors import UsageError
    from inferload.tune.sweep_cli import generator_ceiling_rps
    from tests.support.scenario_factory import steady_one_user, write_scenario

    path = tmp_path / "calibration.json"
    path.write_text(certificate(grpc_roofline=None).to_json())
    grpc = write_scenario(tmp_path, steady_one_user(bare_target("g", "triton-grpc", "127.0.0.1:1")))
    with pytest.raises(UsageError, match=r"--calibration .*certifies no grpc rate"):
        generator_ceiling_rps(path, 1, grpc)
    (tmp_path / "not-one.json").write_text(json.dumps({"roofline_rps": 500}))  # the old stand-in format
    with pytest.raises(UsageError, match=r"--calibration: .*not-one.json: schema"):
        generator_ceiling_rps(tmp_path / "not-one.json", 1, grpc)
