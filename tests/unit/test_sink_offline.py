"""The InfluxDB sink without an InfluxDB: line protocol, secret masking, settings, the bounded
background writer on a scripted writer, and an address where nothing listens (the real InfluxDB's
write API is in tests/integration/test_sink.py)."""

from __future__ import annotations

import math
import socket
import time

import pytest
from pydantic import SecretStr, ValidationError

from inferload.observe.sink import (
    BackgroundWriter,
    Point,
    SinkError,
    SinkSettings,
    SinkSettingsError,
    encode_point,
    make_writer,
    mask_secrets,
    settings_from_mapping,
)
from tests.support.ports import free_port
from tests.support.waiting import wait_until

# --- line protocol ---------------------------------------------------------------------------------


def test_a_point_encodes_tags_sorted_and_typed_fields_with_a_nanosecond_time() -> None:
    point = Point(
        "requests",
        {"target": "t1", "run_id": "r1"},
        {"count": 3, "p99_ms": 12.5, "ok": True, "text": "hi"},
        1_700_000_000_000_000_000,
    )
    assert encode_point(point) == 'requests,run_id=r1,target=t1 count=3i,p99_ms=12.5,ok=true,text="hi" 1700000000000000000'


def test_special_characters_are_escaped_where_line_protocol_needs_it() -> None:
    point = Point("my measure,x", {"tag key": "a=b,c d"}, {"field=1": 'say "hi"\\'}, 1)
    assert encode_point(point) == 'my\\ measure\\,x,tag\\ key=a\\=b\\,c\\ d field\\=1="say \\"hi\\"\\\\" 1'


def test_missing_and_non_finite_fields_and_empty_tags_are_left_out() -> None:
    point = Point(
        "requests", {"run_id": "r", "model": ""}, {"mean_ms": None, "p50_ms": math.nan, "max_ms": math.inf, "count": 0}, 5
    )
    assert encode_point(point) == "requests,run_id=r count=0i 5"


def test_a_point_without_any_writable_field_is_not_written() -> None:
    assert encode_point(Point("requests", {"run_id": "r"}, {"mean_ms": None}, 5)) is None


# --- settings and secrets --------------------------------------------------------------------------


def test_secrets_are_masked_in_text_and_urls() -> None:
    text = "auth Token s3cret failed for http://admin:hunter2@db:8086/write"
    assert mask_secrets(text, ["s3cret"]) == "auth Token *** failed for http://admin:***@db:8086/write"


def test_settings_keep_the_token_out_of_their_repr_and_description() -> None:
    settings = SinkSettings(url="http://db:8086/", api="v2", org="o", token=SecretStr("s3cret"))
    assert settings.url == "http://db:8086"
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.describe()
    assert settings.secrets() == ["s3cret"]


def test_a_password_inside_the_url_is_masked_in_the_description_that_is_logged() -> None:
    settings = SinkSettings(url="http://bob:hunter2@db:8086")
    assert "hunter2" not in settings.describe() and "http://bob:***@db:8086" in settings.describe()


def test_v2_without_org_says_what_to_give() -> None:
    with pytest.raises(ValidationError, match="api v2 needs an org"):
        SinkSettings(url="http://db:8086", api="v2", token=SecretStr("t"))


def test_a_url_without_a_scheme_is_refused_with_an_example() -> None:
    with pytest.raises(ValidationError, match=r"expected an http:// or https:// URL like 'http://127\.0\.0\.1:8086'"):
        SinkSettings(url="db:8086")


def test_environment_variables_fill_what_options_leave_out() -> None:
    settings = settings_from_mapping({"database": "x"}, {"INFLUX_URL": "http://db:8086", "INFLUX_TOKEN": "tok"})
    assert settings is not None and settings.url == "http://db:8086" and settings.database == "x"
    assert settings.token is not None and settings.token.get_secret_value() == "tok"
    assert settings_from_mapping({}, {}) is None


def test_settings_that_are_not_valid_name_their_option_and_variable_and_never_echo_a_secret() -> None:
    with pytest.raises(SinkSettingsError) as bad_url:
        settings_from_mapping({}, {"INFLUX_URL": "ftp://db:8086"})
    assert str(bad_url.value) == (
        "--influx-url (or INFLUX_URL): expected an http:// or https:// URL like 'http://127.0.0.1:8086'; got 'ftp://db:8086'"
    )
    with pytest.raises(SinkSettingsError) as bad_port:  # a password in the URL is masked in the message
        settings_from_mapping({"url": "http://user:hunter2@db:notaport"}, {})
    assert bad_port.value.problems == [
        (
            "url",
            "expected an http:// or https:// URL with a host (and a port from 1 to 65535, if any) like"
            " 'http://127.0.0.1:8086'; got 'http://user:***@db:notaport'",
        )
    ]
    with pytest.raises(SinkSettingsError) as bad_api:
        settings_from_mapping({"url": "http://db:8086", "api": "v9"}, {})
    assert bad_api.value.problems == [("api", "expected 'v1' or 'v2'; got 'v9'")]
    with pytest.raises(SinkSettingsError) as bad_token:  # a config file's token of the wrong type
        settings_from_mapping({"url": "http://db:8086", "token": 31337}, {})
    assert bad_token.value.problems == [("token", "expected a valid string")] and "31337" not in str(bad_token.value)


# --- the background writer, on a scripted writer ------------------------------------------------------


class ScriptedWriter:
    """Records bodies; fails while `failures` holds errors to raise."""

    def __init__(self, failures: list[SinkError] | None = None, delay_s: float = 0.0) -> None:
        self.bodies: list[bytes] = []
        self.failures = failures or []
        self.delay_s = delay_s
        self.calls = 0

    def write(self, body: bytes, timeout_s: float | None = None) -> None:
        self.calls += 1
        time.sleep(self.delay_s)  # stimulus: a slow database
        if self.failures:
            raise self.failures.pop(0)
        self.bodies.append(body)

    def close(self) -> None:
        pass

    def lines(self) -> list[str]:
        return [line for body in self.bodies for line in body.decode().splitlines()]


def points(n: int, start: int = 0) -> list[Point]:
    return [Point("m", {"run_id": "r"}, {"i": i}, i) for i in range(start, start + n)]


def test_submit_does_no_io_and_the_flush_writes_in_batches_of_batch_size() -> None:
    writer = ScriptedWriter()
    sink = BackgroundWriter(writer, batch_size=4)
    sink.submit(points(10))
    assert writer.calls == 0
    while sink.stats().points_pending:
        assert sink.flush_once()
    assert [len(b.decode().splitlines()) for b in writer.bodies] == [4, 4, 2]
    assert sink.stats().points_written == 10 and sink.stats().points_dropped == 0


def test_a_retryable_failure_keeps_the_batch_and_it_is_written_later_in_order() -> None:
    writer = ScriptedWriter([SinkError("refused", retryable=True), SinkError("HTTP 503", retryable=True, status=503)])
    sink = BackgroundWriter(writer, batch_size=100)
    sink.submit(points(3))
    assert not sink.flush_once() and not sink.flush_once()
    assert sink.flush_once()
    assert [line.split(" ")[1] for line in writer.lines()] == ["i=0i", "i=1i", "i=2i"]
    stats = sink.stats()
    assert (stats.points_written, stats.points_dropped, stats.write_errors, stats.last_error) == (3, 0, 2, "HTTP 503")


def test_beyond_the_buffer_bound_the_oldest_points_are_dropped_and_counted() -> None:
    writer = ScriptedWriter([SinkError("refused", retryable=True)])
    sink = BackgroundWriter(writer, batch_size=5, max_buffer_points=8)
    sink.submit(points(5))
    assert not sink.flush_once()  # the 5 go back to the buffer
    sink.submit(points(6, start=5))  # 11 > 8: the 3 oldest go
    assert sink.stats().points_dropped == 3 and sink.stats().points_pending == 8
    while sink.stats().points_pending:
        sink.flush_once()
    assert [line.split(" ")[1] for line in writer.lines()] == [f"i={i}i" for i in range(3, 11)]


def test_a_batch_the_server_rejects_is_dropped_and_counted_not_retried() -> None:
    writer = ScriptedWriter([SinkError("HTTP 400: bad line", retryable=False, status=400)])
    sink = BackgroundWriter(writer, batch_size=10)
    sink.submit(points(4))
    sink.flush_once()
    assert sink.stats().points_dropped == 4 and sink.stats().points_pending == 0 and writer.calls == 1


def test_close_writes_what_is_left_and_counts_what_it_cannot_write_as_dropped() -> None:
    writer = ScriptedWriter([SinkError("refused", retryable=True)] * 100)
    sink = BackgroundWriter(writer, batch_size=10)
    sink.submit(points(25))
    stats = sink.close(timeout_s=0.5)
    assert stats.points_written == 0 and stats.points_dropped == 25 and stats.points_pending == 0


def test_the_background_thread_writes_without_being_asked() -> None:
    writer = ScriptedWriter()
    sink = BackgroundWriter(writer, flush_interval_s=0.05)
    sink.start()
    sink.submit(points(7))
    wait_until(lambda: sink.stats().points_written >= 7, 5, "the background thread to write 7 points", interval_s=0.02)
    assert sink.close().points_written == 7


def test_a_slow_writer_never_slows_submit() -> None:
    writer = ScriptedWriter(delay_s=0.5)
    sink = BackgroundWriter(writer, flush_interval_s=0.01)
    sink.start()
    started = time.perf_counter()
    for i in range(200):
        sink.submit(points(5, start=i * 5))
        time.sleep(0.001)  # stimulus: submissions spread over the time a write is blocked
    elapsed = time.perf_counter() - started
    assert elapsed < 0.45, f"submitting took {elapsed:.2f} s while a write was blocked for 0.5 s"
    sink.close(timeout_s=3)


API_SETTINGS = {"v1": {}, "v2": {"api": "v2", "org": "o", "token": SecretStr("secret-token")}}
WRITE_PATH = {"v1": "/write", "v2": "/api/v2/write"}


@pytest.mark.parametrize("api", API_SETTINGS)
def test_an_unreachable_influxdb_is_retryable_and_said_in_a_few_words(api: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    writer = make_writer(SinkSettings(url=url, timeout_s=1, **API_SETTINGS[api]))  # type: ignore[arg-type]
    with pytest.raises(SinkError) as caught:
        writer.write(b"m f=1i 1\n")
    assert caught.value.retryable
    assert str(caught.value) == f"cannot reach {url}{WRITE_PATH[api]}: connection refused"


@pytest.mark.parametrize("api", API_SETTINGS)
def test_an_influxdb_that_never_answers_is_retryable_and_said_so(api: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the kernel's backlog), never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        writer = make_writer(SinkSettings(url=url, timeout_s=0.5, **API_SETTINGS[api]))  # type: ignore[arg-type]
        with pytest.raises(SinkError) as caught:
            writer.write(b"m f=1i 1\n")
    assert caught.value.retryable
    assert str(caught.value) == f"{url}{WRITE_PATH[api]}: no answer within 0.5 s"
