"""The live InfluxDB export: each closed window's figures per target, live into InfluxDB.

A listener class (no globals) on the local or master Locust process. A background greenlet wakes
every window, turns every window that has closed into a `requests` point (tags run_id, target,
server, protocol, model, worker=all; on a master also one series per worker, tagged with its id)
and hands them to a `BackgroundWriter`, whose own greenlet writes them in batches (a window in
which nothing finished is written too: count 0, no latency fields, so a stall shows as zeros
rather than a gap): a request never waits on InfluxDB, and a dead or slow InfluxDB costs
points (counted), never load. On the master, windows close a Locust report interval later (the
workers' figures arrive with their reports), and a window that receives late figures is written
again with its merged totals (same series and time: InfluxDB keeps the last). Each window's HDR
histogram goes with it (`latency_histograms`, observe/points.py), and each target's exact
figures since the end of the warm-up (`requests_cumulative`, below). Run start and stop,
the end of the warm-up and every change of the shape's user count go to `events`.

A target on a Triton decoupled model also gets a `streams` point per window (`stream_point`, next
to that window's `requests` point, same time and tags): `requests` (streamed requests that
succeeded), `responses`, `responses_per_s`, `responses_per_request` (mean),
`first_response_{mean,p50,p90,p99,max}_ms` (send -> first response) and
`inter_response_{mean,p50,p90,p99,max}_ms` (between consecutive responses); a figure with no sample
is left out. Percentiles are exact over all workers (merged histograms). A generative target
(openai-chat, openai-completions) gets its content events there too, and a `tokens` point per window
(`tokens_point`): `generations`, `output_tokens`, `output_tokens_per_s`,
`tpot_{mean,p50,p90,p99,max}_ms` (time per output token of the generations that ended in the window),
`itl_{mean,p50,p90,p99,max}_ms` (their inter-token latencies, token-weighted)
and, when the target sets goodput thresholds, `good` and `goodput_per_s`.

Made by the run's core (`run.attached_run.MeasuredRun`) when it is given sink settings (a scenario
run's from its options, `add_influx_arguments` and `sink_settings_from_options`; `attach`'s from its
``influx_url`` and the ``INFLUX_*`` variables); the core puts `close()`'s summary into summary.json's
``streaming``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from inferload.errors import MASK
from inferload.measure.decoupled_record import StreamWindow
from inferload.measure.generation_record import GenerationWindow
from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.measure.run_record import RunRecord
from inferload.observe.points import histogram_point
from inferload.observe.sink import BackgroundWriter, Point, SinkSettings, Writer, open_sink, seconds_to_ns, settings_from_mapping
from inferload.results.files import default_run_id  # the same id the results use
from inferload.scenario.schema import RunOutline, Scenario

# The `requests_cumulative` InfluxDB measurement: exact percentiles since the end of the warm-up.
#
# Per-window p99s cannot be combined into the p99 of everything so far; window histograms can. Each
# closed window gets, per target, one point at the window's time (as its `requests` point; tags
# run_id, target, server, protocol, model, worker=all) whose figures cover every window from the
# first steady one (the first that starts at or after the end of the warm-up: those windows.csv marks
# `steady`) through this one, all workers merged: `count`, `failures`, `windows`, `mean_ms`,
# `p50_ms`, `p90_ms`, `p95_ms`, `p99_ms`, `p999_ms`, `max_ms` (no latency field before a success).
#
# `CumulativeLatency` keeps one running merge per target and adds each new window once. On a master a
# late worker report can still add to a window already counted; then that target's merge is redone
# from its first steady window (histograms merge exactly, they cannot be subtracted) and its points
# from the changed window on are written again (same series and time: InfluxDB keeps the last).
CUMULATIVE_MEASUREMENT = "requests_cumulative"
WindowKey = tuple[int, str]


def first_steady_index(warmup_ends_at: float, window_s: float) -> int:
    """The first window whose start is at or after the end of the warm-up."""
    index = math.ceil(warmup_ends_at / window_s)
    while (index - 1) * window_s >= warmup_ends_at:
        index -= 1
    while index * window_s < warmup_ends_at:
        index += 1
    return index


@dataclass(frozen=True)
class CumulativeFigures:
    """One target's figures from the first steady window through window `index`."""

    index: int
    target: str
    windows: int
    requests: int
    failures: int
    latency_ms: dict[str, float | None]


@dataclass
class _Running:
    stats: LatencyStats = field(default_factory=LatencyStats)
    through: int | None = None  # the last window merged
    counts: dict[int, int] = field(default_factory=dict)  # requests merged per window index

    def reset(self) -> None:
        self.stats.release()
        self.stats = LatencyStats()
        self.through = None
        self.counts.clear()


class CumulativeLatency:
    """Running merges of every target's steady windows (one per target)."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}

    def update(self, windows: Iterable[tuple[WindowKey, WindowStats]], first_index: int) -> list[CumulativeFigures]:
        """The figures that are new or changed, given every closed window so far (any order;
        windows before `first_index`, the first steady one, are left out)."""
        by_target: dict[str, list[tuple[int, WindowStats]]] = {}
        for (index, target), stats in windows:
            if index >= first_index:
                by_target.setdefault(target, []).append((index, stats))
        changed: list[CumulativeFigures] = []
        for target, series in sorted(by_target.items()):
            series.sort(key=lambda item: item[0])
            changed += self._update_target(target, series)
        return changed

    def _update_target(self, target: str, series: list[tuple[int, WindowStats]]) -> list[CumulativeFigures]:
        running = self._running.setdefault(target, _Running())
        through = running.through
        late = [i for i, s in series if through is not None and i <= through and s.requests != running.counts.get(i, 0)]
        emit_from = min(late) if late else (series[0][0] if through is None else through + 1)
        if late:
            running.reset()
        out = []
        for index, stats in series:
            if running.through is not None and index <= running.through:
                continue
            if isinstance(stats, LatencyStats):
                running.stats.merge(stats)
            elif isinstance(stats, ClosedStats) and stats.requests:
                reopened = stats.reopen()
                running.stats.merge(reopened)
                reopened.release()
            running.counts[index] = stats.requests
            running.through = index
            if index >= emit_from:
                totals = running.stats
                out.append(
                    CumulativeFigures(index, target, len(running.counts), totals.requests, totals.failures, totals.latency_ms())
                )
        return out


def cumulative_point(run_id: str, target_tags: Mapping[str, str], window_s: float, figures: CumulativeFigures) -> Point:
    """The `requests_cumulative` point of one target through one window (pure)."""
    latency = figures.latency_ms
    fields: dict[str, float | int | None] = {
        "count": figures.requests,
        "failures": figures.failures,
        "windows": figures.windows,
        **{f"{key}_ms": latency[key] for key in ("mean", "p50", "p90", "p95", "p99", "p999", "max")},
    }
    tags = {"run_id": run_id, "worker": "all", **target_tags}
    return Point(CUMULATIVE_MEASUREMENT, tags, fields, seconds_to_ns(figures.index * window_s))


logger = logging.getLogger(__name__)

WORKER_TAG_MERGED = "all"
#: options that hold a secret: never left in the parsed options Locust ships to workers
SECRET_OPTIONS = ("influx_token", "influx_password")
LOCAL_GRACE_S = 0.25  # a request that ends at a window's edge is recorded a moment later


def add_influx_arguments(parser: Any) -> None:
    """Locust command-line options for streaming (each also read from its INFLUX_* variable)."""
    # On Locust's parser itself (not a group): only there does `include_in_web_ui` exist, and the
    # web UI must not show the token.
    group = parser
    hidden = {"include_in_web_ui": False}
    group.add_argument(
        "--influx-url",
        env_var="INFLUX_URL",
        help="stream per-window figures to this InfluxDB, e.g. http://127.0.0.1:8086 (off when not given)",
        **hidden,
    )
    group.add_argument(
        "--influx-api",
        env_var="INFLUX_API",
        choices=("v1", "v2"),
        help="v1: POST /write (InfluxDB 1.x, 2.x with a DBRP mapping, 3.x); v2: influxdb-client (default v1)",
        **hidden,
    )
    group.add_argument("--influx-db", env_var="INFLUX_DB", help="v1 database / v2 bucket (default inferload)", **hidden)
    group.add_argument("--influx-org", env_var="INFLUX_ORG", help="v2 organisation", **hidden)
    group.add_argument(
        "--influx-token",
        env_var="INFLUX_TOKEN",
        help="API token (prefer the INFLUX_TOKEN variable; never written to logs or results)",
        **hidden,
    )
    group.add_argument("--influx-user", env_var="INFLUX_USER", help="v1 user name", **hidden)
    group.add_argument(
        "--influx-password", env_var="INFLUX_PASSWORD", help="v1 password (prefer the INFLUX_PASSWORD variable)", **hidden
    )


def sink_settings_from_options(options: Any) -> SinkSettings | None:
    """SinkSettings from Locust's parsed options; None when no --influx-url/INFLUX_URL is set.

    Then the secrets are taken out of `options` (`hide_secret_options`): a Locust master sends its
    parsed options to every worker with each spawn message, to anyone who reaches its port."""
    if options is None:
        return None
    values = {
        "url": getattr(options, "influx_url", None),
        "api": getattr(options, "influx_api", None),
        "database": getattr(options, "influx_db", None),
        "org": getattr(options, "influx_org", None),
        "token": getattr(options, "influx_token", None),
        "username": getattr(options, "influx_user", None),
        "password": getattr(options, "influx_password", None),
    }
    hide_secret_options(options)
    return settings_from_mapping(values, environ={})  # Locust's parser already read the INFLUX_* variables


def hide_secret_options(options: Any) -> None:
    """Take the InfluxDB token and password (and a password inside --influx-url) out of Locust's
    parsed options, once inferload has read them: workers do not stream, so they need none of them."""
    for name in SECRET_OPTIONS:
        if getattr(options, name, None) is not None:
            setattr(options, name, None)
    url = getattr(options, "influx_url", None)
    if isinstance(url, str):
        parts = urlsplit(url)
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            options.influx_url = urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}"))


def window_point(
    run_id: str,
    target_tags: dict[str, str],
    index: int,
    window_s: float,
    stats: WindowStats,
    users: int | None,
    arrivals: list[int] | None = None,
    send_lag: WindowStats | None = None,
    worker: str = WORKER_TAG_MERGED,
) -> Point:
    """The `requests` point of one target's window (pure)."""
    latency = stats.latency_ms()
    fields: dict[str, float | int | None] = {
        "count": stats.requests,
        "failures": stats.failures,
        "rps": stats.requests / window_s,
        "mean_ms": latency["mean"],
        "p50_ms": latency["p50"],
        "p90_ms": latency["p90"],
        "p95_ms": latency["p95"],
        "p99_ms": latency["p99"],
        "p999_ms": latency["p999"],
        "max_ms": latency["max"],
        "users": users,
    }
    if arrivals is not None:  # open loop: intended arrivals/s, arrivals not sent, send lag
        fields["target_rps"] = arrivals[0] / window_s
        fields["unsent"] = arrivals[1]
        fields["send_lag_p99_ms"] = send_lag.latency_ms()["p99"] if send_lag is not None else None
    tags = {"run_id": run_id, "worker": worker, **target_tags}
    return Point("requests", tags, fields, seconds_to_ns(index * window_s))


class InfluxExport:
    """Streams a RunRecord's closed windows to InfluxDB (does nothing on a Locust worker)."""

    def __init__(
        self,
        environment: Environment,
        record: RunRecord,
        scenario: Scenario | RunOutline,
        settings: SinkSettings,
        run_id: Callable[[], str] | None = None,
        writer: Writer | None = None,
    ) -> None:
        self.environment = environment
        self.record = record
        self.scenario = scenario
        self.settings = settings
        self.active = not isinstance(environment.runner, WorkerRunner)
        self.run_id = ""
        self._run_id_factory = run_id or self._default_run_id
        self._target_tags = {
            t.name: {"target": t.name, "server": t.server, "protocol": t.protocol, "model": t.model} for t in scenario.targets
        }
        self._emitted: dict[tuple, int] = {}
        self._cumulative = CumulativeLatency()  # requests_cumulative: exact figures since the warm-up
        self._loop: gevent.Greenlet | None = None
        self._last_shape_tick: Any = None
        self._warmup_announced = False
        self._final: dict[str, Any] | None = None
        self.sink: BackgroundWriter | None = None
        if not self.active:
            return
        self.sink = open_sink(settings, writer=writer)
        logger.info("streaming per-window figures to %s", settings.describe())
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.test_stop.add_listener(self._on_test_stop)
        events.quitting.add_listener(self._on_quitting)

    # -- what it reports --------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """points_written, points_dropped, points_pending, write_errors, last_error (no secrets)."""
        if self._final is not None:
            return dict(self._final)
        if self.sink is None:
            return {"points_written": 0, "points_dropped": 0, "points_pending": 0, "write_errors": 0, "last_error": None}
        return self.sink.stats().as_dict()

    # -- Locust events ----------------------------------------------------------------------
    def _on_test_start(self, **_: Any) -> None:
        self.run_id = self._run_id_factory()
        self._cumulative = CumulativeLatency()
        self._last_shape_tick = None
        self._warmup_announced = self.scenario.warmup <= 0
        started = self.record.started_at or time.time()
        targets = ", ".join(self._target_tags)
        self._event("start", f"run {self.run_id} started: scenario {self.scenario.name} ({targets})", started)
        if self._loop is None:
            self._loop = gevent.spawn(self._run_loop)

    def _on_test_stop(self, **_: Any) -> None:
        if self._loop is not None:
            self._loop.kill(block=False)
            self._loop = None
        self.emit(final=True)
        self._event("stop", f"run {self.run_id} stopped", self.record.stopped_at or time.time())

    def _on_quitting(self, **_: Any) -> None:
        self.close()

    def close(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """Write what is left (within `timeout_s`) and report; called when Locust quits."""
        if self.sink is None or self._final is not None:
            return self.summary()
        self.emit(final=True)  # on a master: figures of the workers' last reports
        stats = self.sink.close(timeout_s)
        self._final = stats.as_dict()
        message = f"streaming to InfluxDB: {stats.points_written} points written, {stats.points_dropped} dropped"
        if stats.last_error:
            message += f" (last error: {stats.last_error})"
        (logger.warning if stats.points_dropped else logger.info)(message)
        return self.summary()

    # -- the background greenlet ------------------------------------------------------------
    def _run_loop(self) -> None:
        period = min(self.record.window_s, 1.0)
        while True:
            gevent.sleep(period)
            self.emit()
            self._watch_shape()

    def _lag_s(self) -> float:
        if isinstance(self.environment.runner, MasterRunner):
            from locust import runners

            return float(runners.WORKER_REPORT_INTERVAL) + 1.0
        return LOCAL_GRACE_S

    def emit(self, final: bool = False, now: float | None = None) -> int:
        """Submit a point for every closed window not yet written (or changed since); the count."""
        if self.sink is None:
            return 0
        now = time.time() if now is None else now
        window_s = self.record.window_s
        lag = self._lag_s()
        points = []
        started = self.record.started_at
        first = None if started is None else int(started // window_s)
        closed = None if final else math.floor((now - lag) / window_s) - 1  # (index + 1) * window_s + lag <= now
        windows = self.record.all_windows(first_index=first, last_index=closed)  # zero-request windows too
        for key, stats in windows:
            index, target = key
            count = stats.requests
            if self._emitted.get(key) == count:
                continue
            self._emitted[key] = count
            tags = self._target_tags.get(target, {"target": target})
            points.append(
                window_point(
                    self.run_id,
                    tags,
                    index,
                    window_s,
                    stats,
                    self.record.users_by_window.get(index),
                    self.record.arrival_windows.get(key),
                    self.record.lag_windows.get(key),
                )
            )
            histogram = histogram_point(self.run_id, tags, index, window_s, stats, WORKER_TAG_MERGED)
            if histogram is not None:
                points.append(histogram)
            streamed = self.record.streams.window(key)  # a streamed target (decoupled model): its `streams` point
            if streamed is not None:
                points.append(stream_point(self.run_id, tags, index, window_s, streamed))
            generated = self.record.generations.window(key)  # a generative target: its `tokens` point
            if generated is not None:
                points.append(tokens_point(self.run_id, tags, index, window_s, generated))
        for worker_key, stats in list(self.record.worker_windows.items()):  # distributed: one series per worker
            index, target, worker = worker_key
            if not final and (index + 1) * window_s + lag > now:
                continue
            if stats.requests == 0 or self._emitted.get(worker_key) == stats.requests:
                continue
            self._emitted[worker_key] = stats.requests
            tags = self._target_tags.get(target, {"target": target})
            points.append(window_point(self.run_id, tags, index, window_s, stats, None, worker=worker))
            histogram = histogram_point(self.run_id, tags, index, window_s, stats, worker)
            if histogram is not None:
                points.append(histogram)
        ends = self.record.warmup_ends_at
        if ends is not None:
            for figures in self._cumulative.update(windows, first_steady_index(ends, window_s)):
                tags = self._target_tags.get(figures.target, {"target": figures.target})
                points.append(cumulative_point(self.run_id, tags, window_s, figures))
        self.sink.submit(points)
        return len(points)

    def _watch_shape(self) -> None:
        now = time.time()
        runner = self.environment.runner
        tick = getattr(runner, "shape_last_tick", None)
        if tick is not None and tick != self._last_shape_tick:
            self._last_shape_tick = tick
            users, rate = tick[0], tick[1]
            self._event("stage", f"users -> {users} (spawn rate {rate:g}/s)", now)
        started = self.record.started_at
        if not self._warmup_announced and started is not None and now >= started + self.scenario.warmup:
            self._warmup_announced = True
            self._event("warmup_end", f"warm-up of {self.scenario.warmup:g} s over", started + self.scenario.warmup)

    def _event(self, kind: str, text: str, at: float) -> None:
        if self.sink is not None:
            self.sink.submit([Point("events", {"run_id": self.run_id, "kind": kind}, {"text": text}, seconds_to_ns(at))])

    def _default_run_id(self) -> str:
        options = self.environment.parsed_options
        given = getattr(options, "run_id", None) if options is not None else None
        return given or default_run_id(self.scenario.name, self.record.started_at or time.time())


STREAMS_MEASUREMENT = "streams"
TOKENS_MEASUREMENT = "tokens"
FIGURES = ("mean", "p50", "p90", "p99", "max")


def tokens_point(run_id: str, target_tags: dict[str, str], index: int, window_s: float, window: GenerationWindow) -> Point:
    """The `tokens` point of one generative target's window (pure)."""
    fields: dict[str, float | int | None] = {
        "generations": window.generations,
        "output_tokens": window.output_tokens,
        "output_tokens_per_s": window.output_tokens / window_s,
    }
    if window.judged:  # the target sets goodput thresholds
        fields["good"] = window.good
        fields["goodput_per_s"] = window.good / window_s
    for prefix, stats in (("tpot", window.tpot), ("itl", window.itl)):
        figures = stats.latency_ms()
        for key in FIGURES:
            fields[f"{prefix}_{key}_ms"] = figures[key]
    tags = {"run_id": run_id, "worker": "all", **target_tags}
    return Point(TOKENS_MEASUREMENT, tags, fields, seconds_to_ns(index * window_s))


def stream_point(run_id: str, target_tags: dict[str, str], index: int, window_s: float, window: StreamWindow) -> Point:
    """The `streams` point of one target's window (pure)."""
    counts = window.counts
    fields: dict[str, float | int | None] = {
        "requests": counts.requests,
        "responses": counts.responses,
        "responses_per_s": counts.responses / window_s,
        "responses_per_request": counts.responses / counts.requests if counts.requests else None,
    }
    for prefix, stats in (("first_response", window.first_response), ("inter_response", window.inter_response)):
        figures = stats.latency_ms()
        for key in FIGURES:
            fields[f"{prefix}_{key}_ms"] = figures[key]
    tags = {"run_id": run_id, "worker": "all", **target_tags}
    return Point(STREAMS_MEASUREMENT, tags, fields, seconds_to_ns(index * window_s))
