"""The `inferload` command's answers that start nothing: validate, usage errors, status of nothing."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import SCENARIOS, inferload


def test_validate_accepts_every_shipped_scenario():
    done = inferload("validate", *map(str, SCENARIOS))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": ok") == len(SCENARIOS)


def test_validate_exits_2_with_one_line_per_problem_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration: 10s\nwarmup: 20s\ntargets: []\nshape: {kind: steady, users: 0}\nextra: 1\n")
    done = inferload("validate", str(bad), str(SCENARIOS[0]))
    assert done.returncode == 2
    problems = done.stderr.strip().splitlines()
    assert all(line.startswith(f"{bad}: ") for line in problems), problems
    assert {p.split(": ")[1] for p in problems} >= {"warmup", "targets", "shape.users", "extra"}
    assert "Traceback" not in done.stderr
    assert f"{SCENARIOS[0]}: ok" in done.stdout  # the good file is still checked


def test_a_missing_scenario_file_is_a_one_line_error(tmp_path):
    done = inferload("validate", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "nope.yaml" in done.stderr


def test_bad_cli_arguments_are_usage_errors():  # every subcommand's bad options: tests/unit/test_cli_options.py
    done = inferload("servers", "sideways")
    assert done.returncode == 2 and "invalid choice" in done.stderr
    done = inferload("servers", "status", "--ports", "triton_grpc=notaport")
    assert done.returncode == 2 and "--ports" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("ports", "said"),
    [
        ("triton_grpc=9001,triton_http=9001", "triton_http and triton_grpc both 9001"),
        ("triton_grpc=9001,triton_grpc=9002", "triton_grpc is given twice"),
    ],
)
def test_servers_refuse_two_endpoints_on_one_port_before_starting_anything(tmp_path, ports, said):
    done = inferload("servers", "up", "--only", "triton", "--ports", ports, "--state-dir", str(tmp_path))
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_servers_status_reports_nothing_running_for_an_empty_state_dir_on_the_ports_given(tmp_path):
    done = inferload("servers", "status", "--state-dir", str(tmp_path), "--ports", "triton_grpc=9123,ts_inference=9124")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] in ([], {}, False) or not any(s.get("running") for s in status.get("servers", {}).values())
    assert (status["ports"]["triton_grpc"], status["ports"]["ts_inference"], status["ports"]["triton_http"]) == (9123, 9124, 8000)
