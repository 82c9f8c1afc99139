"""`inferload report --influx-url URL --run-id ID [--from T] [--to T] [--workers W,...]`: exact
percentiles over any range and subset of workers from the window histograms a run streamed to
InfluxDB (`latency_histograms`, see observe/points.py), instead of a results folder.

It reads through the v1 `/query` API (InfluxQL: InfluxDB 1.x, 2.x with a DBRP mapping, 3.x), with
the streaming options' credentials (INFLUX_TOKEN, else INFLUX_USER/INFLUX_PASSWORD). Times are
seconds after the run's start (its `start` event) or ISO-8601, as for a results folder; the windows
wholly inside the range are merged by the same code (`inferload.results.histograms.merge_range`),
so both places give the same figures for the same run.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from inferload.observe.points import HISTOGRAM_MEASUREMENT, line_from_row
from inferload.observe.sink import SinkSettings, SinkSettingsError, mask_secrets, settings_from_mapping
from inferload.results.files import ResultsError
from inferload.results.histograms import RangeFigures, merge_range, parse_time, print_range
from inferload.servermetrics.http_client import connection_problem

if TYPE_CHECKING:
    import requests

QUERY_TIMEOUT_S = 30.0


def influxql_string(text: str) -> str:
    """A single-quoted InfluxQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class InfluxReader:
    """InfluxQL queries through `POST /query` (epoch ns); errors as ResultsError, secrets masked."""

    def __init__(self, settings: SinkSettings) -> None:
        # imported here, once the imports above have let Locust patch the standard library for
        # gevent: `requests` (ssl) imported before that patch recurses without end on its first call
        import requests

        from inferload.servermetrics.http_client import bounded_session

        self._requests = requests
        self.settings = settings
        self._session: requests.Session = bounded_session()
        self._headers: dict[str, str] = {}
        if settings.token is not None:
            self._headers["Authorization"] = f"Token {settings.token.get_secret_value()}"
        elif settings.username and settings.password is not None:
            self._session.auth = (settings.username, settings.password.get_secret_value())

    def rows(self, influxql: str) -> list[dict[str, Any]]:
        """Every row of a one-statement query, as {column: value} (tags of GROUP BY included)."""
        url = f"{self.settings.url}/query"
        params = {"db": self.settings.database, "q": influxql, "epoch": "ns"}
        try:
            response = self._session.post(url, data=params, headers=self._headers, timeout=QUERY_TIMEOUT_S)
            answer = response.json()
        except self._requests.Timeout:
            raise ResultsError(self._mask(f"--influx-url: {url}: no answer within {QUERY_TIMEOUT_S:g} s")) from None
        except self._requests.RequestException as error:
            raise ResultsError(self._mask(f"--influx-url: cannot reach {url}: {connection_problem(error)}")) from None
        except (ValueError, RecursionError):
            raise ResultsError(self._mask(f"--influx-url: {url} answered HTTP {response.status_code}, not JSON")) from None
        results = answer.get("results") or [{}]
        problem = answer.get("error") or results[0].get("error")
        if problem or response.status_code >= 300:
            detail = problem or f"HTTP {response.status_code}"
            raise ResultsError(self._mask(f"--influx-url: {url} (database {self.settings.database!r}): {detail}"))
        out = []
        for series in results[0].get("series", []):
            for values in series["values"]:
                out.append({**series.get("tags", {}), **dict(zip(series["columns"], values, strict=True))})
        return out

    def close(self) -> None:
        self._session.close()

    def _mask(self, text: str) -> str:
        return mask_secrets(text, self.settings.secrets())


def run_start_s(reader: InfluxReader, run_id: str) -> float:
    """The run's start: the time of its `start` event (Unix seconds)."""
    rows = reader.rows(f'SELECT "text" FROM "events" WHERE "run_id" = {influxql_string(run_id)} AND "kind" = \'start\'')
    if not rows:
        raise ResultsError(f"--run-id: no run {run_id!r} in InfluxDB database {reader.settings.database!r} (no start event)")
    return int(rows[-1]["time"]) / 1e9


def histogram_lines(reader: InfluxReader, run_id: str, t_from: float | None, t_to: float | None) -> list[dict[str, Any]]:
    """The run's `latency_histograms` points that start inside [t_from, t_to), as histograms.jsonl lines."""
    where = [f'"run_id" = {influxql_string(run_id)}']
    if t_from is not None:
        where.append(f"time >= {round(t_from * 1e9) - 1000}")
    if t_to is not None:
        where.append(f"time < {round(t_to * 1e9)}")
    lines = []
    for row in reader.rows(f'SELECT * FROM "{HISTOGRAM_MEASUREMENT}" WHERE {" AND ".join(where)}'):
        try:
            lines.append(line_from_row(row))
        except ValueError as error:
            raise ResultsError(f"InfluxDB {HISTOGRAM_MEASUREMENT}, run {run_id!r}, time {row.get('time')} ns: {error}") from None
    return lines


def influx_range_figures(
    settings: SinkSettings, run_id: str, t_from: str | None, t_to: str | None, workers: list[str] | None
) -> tuple[float, list[RangeFigures]]:
    """The run's start and the exact figures per target over the range, from InfluxDB."""
    reader = InfluxReader(settings)
    try:
        start = run_start_s(reader, run_id)
        begin, end = parse_time("--from", t_from, start), parse_time("--to", t_to, start)
        lines = histogram_lines(reader, run_id, begin, end)
    finally:
        reader.close()
    return start, merge_range(lines, begin, end, workers, f"InfluxDB {HISTOGRAM_MEASUREMENT} of run {run_id!r}", start)


def cmd_report_influx(args: argparse.Namespace) -> int:
    """`inferload report [RESULTS_DIR] --influx-url URL [--run-id ID] ...`: exit 0, or 2 with one
    line on stderr. The run id is --run-id's, else RESULTS_DIR's summary.json's."""
    chosen = [w.strip() for w in args.range_workers.split(",") if w.strip()] if args.range_workers else None
    try:
        try:
            settings = settings_from_mapping({"url": args.influx_url, "database": args.influx_db})
        except SinkSettingsError as error:
            raise ResultsError(str(error)) from None
        assert settings is not None  # the URL is given
        run_id = args.run_id
        if run_id is None and args.results_dir is not None:
            from inferload.results.files import read_summary

            run_id = read_summary(args.results_dir).run_id
        if run_id is None:
            raise ResultsError("--influx-url needs --run-id (or a RESULTS_DIR whose summary.json names the run)")
        start, results = influx_range_figures(settings, run_id, args.t_from, args.t_to, chosen)
    except ResultsError as error:
        print(f"inferload report: {error}", file=sys.stderr)
        return 2
    return print_range(results, start, args.as_json)
