"""The sidecar collector: scrape every source each interval, write the points, never die.

    python -m collectors --config collectors/example.yaml
    python -m collectors --scenario scenarios/compare.yaml --run-id R --influx-url http://...

Each interval every source is scraped once (`Source.scrape(now)`); the points get the run's
`run_id` tag and go to a `BackgroundWriter`, so a slow InfluxDB never delays a scrape. A source
that fails is logged once and reported as an `events` point (kind `source_down`); it is tried
again every interval, and when it answers again that is logged and reported (`source_up`). The
collector's own start and stop are `events` too (`collector_start`, `collector_stop`).
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from inferload.errors import InferloadError, Problem, ScenarioError, ScrapeError
from inferload.observe.sink import (
    BackgroundWriter,
    Point,
    SinkSettings,
    SinkSettingsError,
    mask_secrets,
    open_sink,
    seconds_to_ns,
    settings_from_mapping,
)
from inferload.observe.sources import (
    BentoMLSource,
    KServeSource,
    NvmlSource,
    OpenAISource,
    ServerSource,
    Source,
    TorchServeSource,
    TritonSource,
)
from inferload.observe.sources.triton_trace_file import TritonTraceSourceConfig, build_trace_source, trace_sources
from inferload.scenario.kinds import implementation
from inferload.scenario.messages import DURATION_HINT, parse_duration
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import Target
from inferload.servermetrics.http_client import HttpClient
from inferload.servermetrics.readers import metrics_page
from inferload.servermetrics.triton import TritonStatisticsReader

logger = logging.getLogger(__name__)

#: the shortest scrape interval: shorter only loads the servers (0 would scrape in a busy loop)
MIN_INTERVAL_S = 0.1
#: the longest: a day
MAX_INTERVAL_S = 86_400.0
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class CollectorConfigError(InferloadError):
    """The collector's configuration is invalid; `.problems` holds one line each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(f"expected {DURATION_HINT}; got {value!r}") from None


Seconds = Annotated[float, BeforeValidator(_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TritonStatisticsConfig(_Model):
    address: str  # host:port of Triton's HTTP or gRPC endpoint
    protocol: Literal["http", "grpc"] = "http"


class TritonSourceConfig(_Model):
    kind: Literal["triton"]
    target: str
    model: str
    metrics_url: str
    statistics: TritonStatisticsConfig | None = None

    @classmethod
    def for_target(cls, target: Target, metrics_url: str) -> TritonSourceConfig:
        """A scenario target's source: its metrics page, and the statistics API on its own address."""
        statistics = TritonStatisticsConfig(address=target.address, protocol=target.protocol)
        return cls(kind="triton", target=target.name, model=target.model, metrics_url=metrics_url, statistics=statistics)


class TorchServeSourceConfig(_Model):
    kind: Literal["torchserve"]
    target: str
    model: str
    metrics_url: str

    @classmethod
    def for_target(cls, target: Target, metrics_url: str) -> TorchServeSourceConfig:
        return cls(kind="torchserve", target=target.name, model=target.model, metrics_url=metrics_url)


class KServeSourceConfig(_Model):
    kind: Literal["kserve"]
    target: str
    model: str
    metrics_url: str  # KServe's /metrics, on its REST port

    @classmethod
    def for_target(cls, target: Target, metrics_url: str) -> KServeSourceConfig:
        return cls(kind="kserve", target=target.name, model=target.model, metrics_url=metrics_url)


class BentoMLSourceConfig(_Model):
    kind: Literal["bentoml"]
    target: str
    model: str  # the API's name
    metrics_url: str  # BentoML's /metrics, on the service's own port

    @classmethod
    def for_target(cls, target: Target, metrics_url: str) -> BentoMLSourceConfig:
        return cls(kind="bentoml", target=target.name, model=target.model, metrics_url=metrics_url)


class OpenAISourceConfig(_Model):
    kind: Literal["openai"]
    target: str
    model: str
    metrics_url: str  # the server's /metrics (llama.cpp's is read)

    @classmethod
    def for_target(cls, target: Target, metrics_url: str) -> OpenAISourceConfig:
        return cls(kind="openai", target=target.name, model=target.model, metrics_url=metrics_url)


class NvmlSourceConfig(_Model):
    kind: Literal["nvml"]
    host: str | None = None


SourceConfig = Annotated[
    TritonSourceConfig
    | TorchServeSourceConfig
    | KServeSourceConfig
    | BentoMLSourceConfig
    | OpenAISourceConfig
    | NvmlSourceConfig
    | TritonTraceSourceConfig,
    Field(discriminator="kind"),
]


class CollectorConfig(_Model):
    """The collector's YAML file (see collectors/example.yaml). `influx` may leave out what the
    INFLUX_* environment variables or command-line flags give (the token, typically)."""

    run_id: str = "collector"
    interval: Annotated[Seconds, Field(ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)] = 1.0
    timeout: Annotated[Seconds, Field(gt=0)] = 2.0
    influx: dict[str, Any] = Field(default_factory=dict)
    sources: tuple[SourceConfig, ...] = Field(min_length=1)


def load_collector_config(path: Path) -> CollectorConfig:
    from inferload.scenario.yaml_file import read_scenario_yaml

    label = str(path)
    try:
        raw = read_scenario_yaml(path, label)
    except ScenarioError as exc:
        raise CollectorConfigError(exc.problems) from None
    try:
        return CollectorConfig.model_validate(raw)
    except ValidationError as exc:
        raise CollectorConfigError(validation_problems(label, exc)) from None


def validation_problems(label: str, exc: ValidationError) -> list[Problem]:
    """One problem per pydantic error: where (``label``, the key path) and what was expected."""
    from inferload.scenario.messages import format_key_path

    return [
        Problem(label, format_key_path(tuple(item["loc"])), item["msg"].removeprefix("Value error, "))
        for item in exc.errors(include_url=False)
    ]


def sources_from_scenario(scenario: Scenario, gpu: bool = True) -> tuple[SourceConfig, ...]:
    """A source per scenario target that has a `metrics_url`, a trace-file source per Triton server
    whose traced targets take their traces from InfluxDB (``trace.source: influxdb``), and NVML."""
    configs: list[SourceConfig] = []
    for target in scenario.targets:
        url = metrics_page(target)  # KServe's and BentoML's on their own address unless metrics_url says otherwise
        if url is None:
            logger.warning("target %r has no metrics_url: no server metrics for it", target.name)
            continue
        configs.append(implementation(target.server, "source_config")(target, url))
    configs.extend(trace_sources(scenario))
    if gpu:
        configs.append(NvmlSourceConfig(kind="nvml"))
    return tuple(configs)


def build_source(config: SourceConfig, timeout_s: float) -> Source:
    if isinstance(config, TritonSourceConfig):
        http = HttpClient(timeout_s)  # one session for the metrics page and the statistics API
        statistics = None
        if config.statistics is not None:
            statistics = TritonStatisticsReader(config.statistics.address, config.statistics.protocol, timeout_s, http)
        return TritonSource(config.target, config.model, config.metrics_url, statistics, timeout_s, http)
    if isinstance(config, TorchServeSourceConfig):
        return TorchServeSource(config.target, config.model, config.metrics_url, timeout_s)
    if isinstance(config, KServeSourceConfig):
        return KServeSource(config.target, config.model, config.metrics_url, timeout_s)
    if isinstance(config, BentoMLSourceConfig):
        return BentoMLSource(config.target, config.model, config.metrics_url, timeout_s)
    if isinstance(config, OpenAISourceConfig):
        return OpenAISource(config.target, config.model, config.metrics_url, timeout_s)
    if isinstance(config, TritonTraceSourceConfig):
        return build_trace_source(config, timeout_s)
    return NvmlSource(config.host)


def event_point(run_id: str, kind: str, text: str, now: float, **tags: str) -> Point:
    return Point("events", {"run_id": run_id, "kind": kind, **tags}, {"text": text}, seconds_to_ns(now))


def with_run_id(points: Sequence[Point], run_id: str) -> list[Point]:
    return [Point(p.measurement, {**p.tags, "run_id": run_id}, p.fields, p.time_ns) for p in points]


@dataclass
class Collector:
    """Scrapes `sources` every `interval_s` into `sink`; keeps going whatever a source does."""

    sources: Sequence[Source]
    sink: BackgroundWriter
    run_id: str
    interval_s: float = 1.0
    secrets: Sequence[str] = ()
    down: dict[str, str] = field(default_factory=dict)  # source name -> why
    scrapes: int = 0
    failures: int = 0

    def tick(self, now: float) -> list[Point]:
        """Scrape every source once; the points handed to the sink."""
        points: list[Point] = []
        for source in self.sources:
            try:
                scraped = source.scrape(now)
            except ScrapeError as exc:
                self._mark_down(source, str(exc), now, points)
                continue
            except Exception as exc:
                logger.exception("source %s failed unexpectedly", source.name)
                self._mark_down(source, f"{type(exc).__name__}: {exc}", now, points)
                continue
            if source.name in self.down:
                del self.down[source.name]
                logger.info("source %s is back", source.name)
                points.append(event_point(self.run_id, "source_up", f"{source.name} is back", now, source=source.name))
            points.extend(with_run_id(scraped, self.run_id))
        self.scrapes += 1
        self.sink.submit(points)
        return points

    def _mark_down(self, source: Source, why: str, now: float, points: list[Point]) -> None:
        self.failures += 1
        why = mask_secrets(why, self.secrets)
        if source.name not in self.down:
            logger.warning("source %s is down: %s (retrying every %g s)", source.name, why, self.interval_s)
            points.append(event_point(self.run_id, "source_down", f"{source.name} is down: {why}", now, source=source.name))
        self.down[source.name] = why

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Tick every interval until `stop` is set (or `duration_s` has passed)."""
        started = time.time()
        names = ", ".join(s.name for s in self.sources)
        self.sink.submit([event_point(self.run_id, "collector_start", f"collector started: {names}", started)])
        next_tick = time.monotonic()
        while not stop.is_set():
            self.tick(time.time())
            if duration_s is not None and time.time() - started >= duration_s:
                break
            next_tick += self.interval_s
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (slow scrapes): skip ahead instead of bursting
                next_tick = time.monotonic()
                delay = 0.0
            stop.wait(delay)
        self.sink.submit([event_point(self.run_id, "collector_stop", "collector stopped", time.time())])


# --- the command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collectors",
        description="inferload's sidecar: Triton/TorchServe metrics and NVML GPU figures into InfluxDB.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", type=Path, help="collector YAML (see collectors/example.yaml)")
    what.add_argument("--scenario", type=Path, help="take the sources from a scenario's targets (their metrics_url)")
    parser.add_argument(
        "--run-id", help="run_id tag of every point; use the Locust run's --run-id (default: the config's, else 'collector')"
    )
    parser.add_argument("--interval", help="scrape interval, e.g. 1s (default: the config's, else 1s)")
    parser.add_argument("--duration", help="stop after this long (default: run until SIGTERM/SIGINT)")
    parser.add_argument("--no-gpu", action="store_true", help="with --scenario: no NVML source")
    parser.add_argument("--influx-url", help="InfluxDB URL (env INFLUX_URL)")
    parser.add_argument("--influx-api", choices=("v1", "v2"), help="v1 /write (any InfluxDB) or v2 (env INFLUX_API; default v1)")
    parser.add_argument("--influx-db", help="v1 database or v2 bucket (env INFLUX_DB; default inferload)")
    parser.add_argument("--influx-org", help="v2 organisation (env INFLUX_ORG)")
    parser.add_argument("--influx-token", help="API token (env INFLUX_TOKEN; prefer the variable: flags show in ps)")
    parser.add_argument("--influx-user", help="v1 user (env INFLUX_USER)")
    parser.add_argument("--influx-password", help="v1 password (env INFLUX_PASSWORD)")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help=f"logging level: {', '.join(LOG_LEVELS)} (default INFO)",
    )
    return parser


def _settings(args: argparse.Namespace, file_values: dict[str, Any]) -> SinkSettings:
    flags = {
        "url": args.influx_url,
        "api": args.influx_api,
        "database": args.influx_db,
        "org": args.influx_org,
        "token": args.influx_token,
        "username": args.influx_user,
        "password": args.influx_password,
    }
    merged = {**file_values, **{k: v for k, v in flags.items() if v is not None}}
    try:
        settings = settings_from_mapping(merged)
    except SinkSettingsError as exc:  # a flag's, the environment's or the config's value: named by its key
        raise CollectorConfigError([Problem("influx", key, message) for key, message in exc.problems]) from None
    if settings is None:
        raise CollectorConfigError(
            [Problem("influx", "url", "no InfluxDB URL: give --influx-url, INFLUX_URL or influx.url in the config")]
        )
    return settings


def _option_seconds(option: str, text: str | None, low: float, high: float) -> float | None:
    """A duration option in [low, high] seconds (None: not given); ValueError naming the option."""
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except ValueError as error:
        raise ValueError(f"{option}: {error}; got {text!r}") from None
    if not low <= value <= high:
        upper = "" if math.isinf(high) else f" and at most {high:g} s"
        raise ValueError(f"{option}: expected at least {low:g} s{upper}; got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.config is not None:
            config = load_collector_config(args.config)
        else:
            from inferload.scenario.loader import load_scenario

            scenario = load_scenario(args.scenario)
            config = CollectorConfig(sources=sources_from_scenario(scenario, gpu=not args.no_gpu))
        settings = _settings(args, dict(config.influx))
        interval_s = _option_seconds("--interval", args.interval, MIN_INTERVAL_S, MAX_INTERVAL_S) or config.interval
        duration_s = _option_seconds("--duration", args.duration, MIN_INTERVAL_S, math.inf)
    except (InferloadError, ValidationError, ValueError) as exc:
        print(f"collector: {mask_secrets(str(exc), _secret_flags(args))}", flush=True)
        return 2
    run_id = args.run_id or config.run_id
    sources = [build_source(source, config.timeout) for source in config.sources]
    sink = open_sink(settings)
    collector = Collector(sources, sink, run_id, interval_s, secrets=settings.secrets())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logger.info(
        "collecting %s every %g s into %s (run_id %s)",
        ", ".join(s.name for s in sources),
        interval_s,
        settings.describe(),
        run_id,
    )
    collector.run(stop, duration_s)
    for source in sources:
        if isinstance(source, ServerSource):
            source.close()
    stats = sink.close(timeout_s=5.0)
    logger.info(
        "collector stopped: %d points written, %d dropped%s",
        stats.points_written,
        stats.points_dropped,
        f" (last error: {stats.last_error})" if stats.last_error else "",
    )
    return 0


def _secret_flags(args: argparse.Namespace) -> list[str]:
    return [v for v in (getattr(args, "influx_token", None), getattr(args, "influx_password", None)) if v]
