"""What a Locust master's port lets in: signed worker reports only, a signed locustfile only,
no secret in the options Locust ships to workers, and CSV cells a spreadsheet does not run.
(The same against a real master and a rogue client: tests/integration/test_master_security.py.)"""

from __future__ import annotations

import argparse
import logging

import msgpack
import pytest

from inferload.errors import RunKeyError
from inferload.measure.report_auth import ReportOpener, ReportSealer, SignedReports, run_key_from_environ
from inferload.observe.influx_export import sink_settings_from_options
from inferload.results.summary import safe_cell, safe_row
from inferload.run.run_key import LocustfileNotTrusted, run_key_for_distributed_run, sign_locustfile, verify_locustfile

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
PAYLOAD = {"windows": [[1, "t", {"s": 3, "f": 0, "h": "abc", "sum": 1.5, "max": 1.0, "min": 0.1}]], "steady": {}}


def test_a_report_sealed_with_the_run_key_opens_on_the_master():
    opener = ReportOpener(KEY, "inferload_latency")
    assert opener.open("w1", ReportSealer(KEY, "inferload_latency").seal("w1", PAYLOAD)) == PAYLOAD
    assert opener.rejected == 0


@pytest.mark.parametrize(
    "sealed",
    [
        PAYLOAD,  # an old-style, unsigned payload
        ReportSealer(OTHER_KEY, "inferload_latency").seal("w1", PAYLOAD),  # another key
        {"v": 1, "body": msgpack.packb(["inferload_latency", "w1", 1, PAYLOAD]), "mac": b"\0" * 32},  # a made-up MAC
        ReportSealer(KEY, "inferload_requests").seal("w1", PAYLOAD),  # request rows passed off as latency figures
        ReportSealer(KEY, "inferload_latency").seal("w2", PAYLOAD),  # another worker's report, sent as w1
        None,
        "x",
    ],
    ids=["unsigned", "wrong-key", "forged-mac", "wrong-kind", "other-worker", "none", "text"],
)
def test_a_report_not_sealed_by_this_worker_with_the_run_key_is_refused_and_counted(sealed):
    opener = ReportOpener(KEY, "inferload_latency")
    assert opener.open("w1", sealed) is None
    assert opener.rejected == 1


def test_a_recorded_report_sent_again_is_refused():
    sealer, opener = ReportSealer(KEY, "inferload_latency"), ReportOpener(KEY, "inferload_latency")
    first, second = sealer.seal("w1", PAYLOAD), sealer.seal("w1", {"steady": {}})
    assert opener.open("w1", first) == PAYLOAD
    assert opener.open("w1", second) == {"steady": {}}
    assert opener.open("w1", first) is None
    assert opener.rejected == 1


def test_refused_reports_are_logged_once_per_worker(caplog):
    opener = ReportOpener(KEY, "inferload_latency")
    with caplog.at_level(logging.ERROR, logger="inferload.measure.report_auth"):
        for _ in range(5):
            opener.open("rogue", PAYLOAD)
        opener.open("rogue-2", ReportSealer(OTHER_KEY, "inferload_latency").seal("rogue-2", PAYLOAD))
    assert opener.rejected == 6
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "'rogue'" in lines[0] and "not signed" in lines[0]
    assert "'rogue-2'" in lines[1] and "wrong signature" in lines[1]


def test_a_master_or_worker_needs_a_run_key_and_a_local_run_does_not():
    for role in ("master", "worker"):
        with pytest.raises(RunKeyError, match="INFERLOAD_RUN_KEY"):
            SignedReports.for_role("inferload_latency", role, environ={})
    assert SignedReports.for_role("inferload_latency", None, environ={}).rejected == 0
    with pytest.raises(RunKeyError, match="at least 16"):
        run_key_from_environ({"INFERLOAD_RUN_KEY": "short"})
    worker = SignedReports.for_role("inferload_latency", "worker", environ={"INFERLOAD_RUN_KEY": KEY.decode()})
    master = SignedReports.for_role("inferload_latency", "master", environ={"INFERLOAD_RUN_KEY": KEY.decode()})
    assert master.open("w", worker.seal("w", PAYLOAD)) == PAYLOAD


def test_a_signed_locustfile_verifies_with_its_key_only():
    text = sign_locustfile("import locust\nprint('hi')\n", KEY)
    assert verify_locustfile(text, KEY) == text
    with pytest.raises(LocustfileNotTrusted, match="does not match"):
        verify_locustfile(text, OTHER_KEY)
    with pytest.raises(LocustfileNotTrusted, match="does not match"):
        verify_locustfile(text.replace("hi", "pwned"), KEY)
    with pytest.raises(LocustfileNotTrusted, match="no inferload signature"):
        verify_locustfile("import os\nos.system('id')\n", KEY)


def test_remote_workers_need_the_users_key_and_local_ones_get_a_fresh_one():
    with pytest.raises(RunKeyError, match="--remote-workers"):
        run_key_for_distributed_run(1, {})
    assert run_key_for_distributed_run(2, {"INFERLOAD_RUN_KEY": KEY.decode()}) == KEY.decode()
    made = {run_key_for_distributed_run(0, {}) for _ in range(2)}
    assert len(made) == 2 and all(len(key) >= 32 for key in made)


def test_influx_secrets_are_read_then_taken_out_of_the_options_locust_ships_to_workers():
    options = argparse.Namespace(
        influx_url="http://writer:url-secret@127.0.0.1:8086",
        influx_api="v1",
        influx_db="inferload",
        influx_org=None,
        influx_token="token-secret",
        influx_user="writer",
        influx_password="password-secret",
    )
    settings = sink_settings_from_options(options)
    assert settings is not None and settings.token is not None and settings.password is not None
    assert settings.token.get_secret_value() == "token-secret"
    assert settings.password.get_secret_value() == "password-secret"
    shipped = repr(vars(options))
    assert not any(secret in shipped for secret in ("token-secret", "password-secret", "url-secret")), shipped
    assert options.influx_url == "http://writer:***@127.0.0.1:8086"


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"])
def test_a_text_cell_a_spreadsheet_would_run_gets_a_leading_quote(text):
    assert safe_cell(text) == "'" + text


def test_other_cells_and_numbers_are_left_alone():
    assert safe_cell("triton-grpc") == "triton-grpc"
    assert safe_cell(-1.5) == -1.5
    assert safe_cell(None) is None
    assert safe_row({"target": "-x", "residual_ms": -2.0}) == {"target": "'-x", "residual_ms": -2.0}
