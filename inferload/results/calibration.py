"""calibration.json (`inferload calibrate`'s certificate): its schema (pydantic), where the latest
one lives, its readers, and what a run does with it at start (a warning above its roofline, one
INFO line for a rate below the lowest it tested, and summary.json's ``calibration`` key). Closed-loop shapes configure users, not a rate: they are only
recorded, never warned about.

Other parts read a certificate through ``read_calibration(path)`` and ``latest_calibration()``
(both give a `Calibration`), then ``Calibration.roofline_rps_per_process(protocol)``: the highest
open-loop rate per load-generating process at which every figure stayed within its bound (None:
no tested rate did). The schema is documented in docs/calibration.md ("calibration.json");
``schema`` names its version, and a reader refuses another major version.

Where the latest certificate is: ``$INFERLOAD_CALIBRATION`` (a file) when set, else
``$INFERLOAD_HOME/calibration.json`` when ``INFERLOAD_HOME`` is set, else
``~/.cache/inferload/calibration/<host>-<uid>/calibration.json``: one per machine and user, so that a
home shared by machines (or a cache shared by users) never applies one's certificate to another.
`inferload calibrate` writes it there (and into its ``--out``); `latest_calibration_place` is the one
rule, for the writer and the reader.

A certificate that cannot be used at run time (missing keys, wrong types, nested too deep, not a
regular file, too large) is one warning line naming the file and what is wrong; the run goes on
uncalibrated.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from inferload.errors import ConfigFileError, Problem
from inferload.paths import HOME_ENV
from inferload.scenario.input_files import read_limited
from inferload.scenario.limits import MAX_SMALL_FILE_BYTES

logger = logging.getLogger(__name__)

SCHEMA = "inferload-calibration/1"
CALIBRATION_ENV = "INFERLOAD_CALIBRATION"
CALIBRATION_NAME = "calibration.json"
#: the folder under ~/.cache/inferload holding one folder per machine and user (`machine_user_key`)
CALIBRATION_FOLDER = "calibration"
#: problems of an unreadable certificate named in the run's one warning line (the rest are counted)
WARNED_PROBLEMS = 3
#: `inferload run --calibration none` (or INFERLOAD_CALIBRATION=none): read no certificate
NO_CALIBRATION = "none"


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)  # newer minor versions may add keys


class Bounds(_Part):
    """A percentile is within its bound when |measured − true| ≤ percentile_pct % of true + percentile_us."""

    percentile_pct: float = 1.0
    percentile_us: float = 50.0
    rate_pct: float = 0.5  # open loop: |achieved − configured| / configured
    send_lag_p99_ms: float = 0.1  # open loop


class PercentileError(_Part):
    measured_ms: float | None
    true_ms: float | None
    error_us: float | None  # measured − true
    error_pct: float | None  # of true
    within: bool


class CaseResult(_Part):
    """One case: a protocol, a loop, a law, a load; its figures against the truth."""

    name: str
    protocol: str  # "grpc" | "http"
    target_kind: str  # "kserve-v2-grpc" | "kserve-v2-http"
    loop: str  # "closed" | "open"
    law_name: str  # none | fixed | lognormal | bimodal | tail (the key of ``floor``)
    law: dict[str, Any]  # the reference server's delay law
    users: int | None  # closed loop
    configured_rps: float | None  # open loop, all processes together
    processes: int
    requests: int  # inferload's steady-state successes
    server_records: int  # the server's records matched to the steady window
    failures: int
    throughput_rps: float | None
    percentiles: dict[str, PercentileError]  # p50 p90 p99 p999
    achieved_rps: float | None  # open loop
    rate_error_pct: float | None  # open loop: (achieved − configured) / configured, %
    send_lag_ms: dict[str, float | None] | None  # open loop: p50 p99 max
    unsent: int | None  # open loop
    cpu_us_per_request: float | None  # the run's process tree over the steady window
    within_bounds: bool
    misses: list[str]  # each bound missed, in words
    #: one user, closed loop: each request's own error (its latency − its server time − the floor's
    #: p50), joined in order with the server's records; p1 p5 p50 p90 p99 in µs (None: not joined)
    joined_error_us: dict[str, float] | None = None


class StreamCaseResult(_Part):
    """One streams case: ``streams`` concurrent `openai-chat` streams against the reference server's
    scripted generations (``events_per_request`` content events of one token, ``hold_ms`` apart);
    TTFT (p50 p90 p99), TPOT (p50 p99) and the ITL's mean against the server's records."""

    name: str
    streams: int
    events_per_request: int
    hold_ms: float
    processes: int
    requests: int  # inferload's steady-state successes
    server_records: int  # the server's generations matched to the steady window
    failures: int
    ttft: dict[str, PercentileError]
    tpot: dict[str, PercentileError]
    itl_mean: PercentileError
    cpu_us_per_event: float | None  # the run's process tree over the steady window, per content event
    within_bounds: bool
    misses: list[str]


class Roofline(_Part):
    """Per protocol: the highest tested open-loop rate per process with every case within its bounds."""

    rps_per_process: float | None
    first_failing_rps_per_process: float | None
    tested_rps_per_process: list[float]
    ceiling_rps_per_process: float | None  # closed loop, no delay, many users: the generator's own ceiling here
    #: the lowest open-loop rate tested: nothing below it was measured (None in a certificate written
    #: before this key: `lowest_tested` then reads it from ``tested_rps_per_process``)
    lowest_tested_rps_per_process: float | None = None

    def lowest_tested(self) -> float | None:
        """The lowest open-loop rate tested, req/s per process; None: none was tested."""
        if self.lowest_tested_rps_per_process is not None:
            return self.lowest_tested_rps_per_process
        return min(self.tested_rps_per_process, default=None)


class Goal(_Part):
    goal: str
    met: bool | None  # None: not judged by this calibration
    figure: str


class Calibration(_Part):
    """A whole calibration.json."""

    schema_: str
    created_at: str  # ISO-8601 UTC
    elapsed_s: float
    quick: bool
    transport: str  # "native" | "python": the transport certified (INFERLOAD_TRANSPORT)
    processes: int  # load-generating processes per case (1, or --workers N / --remote-workers M)
    machine: dict[str, Any]
    versions: dict[str, Any]
    bounds: Bounds
    #: law -> protocol -> the loopback floor measured on that law's server (samples, p50_us, p90_us,
    #: p99_us, max_us: absent from certificates written before it); "method" -> {"text": how it is measured}
    floor: dict[str, dict[str, Any]]
    cases: list[CaseResult]
    roofline: dict[str, Roofline]  # protocol -> its roofline
    goals: list[Goal]
    #: the streams cases (none in a certificate written before them, or calibrated without HTTP)
    stream_cases: list[StreamCaseResult] = []

    def floor_of(self, law_name: str, protocol: str) -> dict[str, Any] | None:
        """The loopback floor measured for ``law_name`` over ``protocol`` (None: not measured)."""
        return self.floor.get(law_name, {}).get(protocol)

    def roofline_rps_per_process(self, protocol: str) -> float | None:
        """The roofline of ``protocol`` ("grpc" | "http"), req/s per process; None: not certified at any rate."""
        entry = self.roofline.get(protocol)
        return None if entry is None else entry.rps_per_process

    def lowest_tested_rps_per_process(self, protocol: str) -> float | None:
        """The lowest open-loop rate tested over ``protocol``, req/s per process; None: none tested."""
        entry = self.roofline.get(protocol)
        return None if entry is None else entry.lowest_tested()

    def to_json(self) -> str:
        data = self.model_dump(mode="json")
        data = {"schema": data.pop("schema_"), **data}
        return json.dumps(data, indent=2) + "\n"


def calibration_from_dict(data: Mapping[str, Any], source: str) -> Calibration:
    """A `Calibration` from calibration.json's data; ConfigFileError naming ``source`` and the key."""
    schema = data.get("schema")
    if not isinstance(schema, str) or schema.split("/")[0] != SCHEMA.split("/")[0] or schema.split("/")[-1].split(".")[0] != "1":
        raise ConfigFileError([Problem(source, "schema", f"expected {SCHEMA!r}; got {schema!r}")])
    try:
        return Calibration.model_validate({**{k: v for k, v in data.items() if k != "schema"}, "schema_": schema})
    except ValidationError as error:
        problems = [
            Problem(source, ".".join(str(part) for part in issue["loc"]) or "(top)", issue["msg"]) for issue in error.errors()
        ]
        raise ConfigFileError(problems) from None


def read_calibration(path: str | Path) -> Calibration:
    """Read and check one calibration.json; ConfigFileError naming the file when it is unreadable (not
    a regular file, over MAX_SMALL_FILE_BYTES), not JSON (nested too deep included), or not the schema."""
    path = Path(path)
    try:
        text = read_limited(path, MAX_SMALL_FILE_BYTES)  # a regular file: never a FIFO or a device
    except ValueError as error:
        raise ConfigFileError([Problem(str(path), "", str(error).removeprefix(f"{path} "))]) from None
    try:
        data = json.loads(text)
    except RecursionError:  # json's own depth limit: not a ValueError
        raise ConfigFileError([Problem(str(path), "", "expected JSON nested a few levels deep; it is nested too deep")]) from None
    except ValueError as error:
        raise ConfigFileError([Problem(str(path), "", f"expected JSON: {error}")]) from None
    if not isinstance(data, dict):
        raise ConfigFileError([Problem(str(path), "(top)", "expected a JSON object")])
    return calibration_from_dict(data, str(path))


def machine_user_key() -> str:
    """This machine and user as one folder name: ``<hostname>-<uid>`` (the user's name where the
    system has no uids); characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    host = "".join(char if char.isalnum() or char in "._-" else "_" for char in socket.gethostname()) or "localhost"
    user = str(os.getuid()) if hasattr(os, "getuid") else getpass.getuser()
    return f"{host}-{user}"


def latest_calibration_place(environ: Mapping[str, str] | None = None) -> tuple[str, Path]:
    """Where `inferload calibrate` installs the latest certificate and a run looks for it, with the
    variable that places it: (``INFERLOAD_HOME``, ``$INFERLOAD_HOME/calibration.json``) when it is
    set, else (``HOME``, ``$HOME/.cache/inferload/calibration/<machine_user_key()>/calibration.json``)."""
    env = os.environ if environ is None else environ
    home = env.get(HOME_ENV)
    if home:
        return HOME_ENV, Path(home) / CALIBRATION_NAME
    cache = Path(env.get("HOME") or str(Path.home())) / ".cache" / "inferload"
    return "HOME", cache / CALIBRATION_FOLDER / machine_user_key() / CALIBRATION_NAME


def default_calibration_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where `inferload calibrate` keeps the latest certificate (`latest_calibration_place`)."""
    return latest_calibration_place(environ)[1]


def latest_calibration_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The certificate a run applies: ``$INFERLOAD_CALIBRATION`` (``none``: None) or the default place."""
    env = os.environ if environ is None else environ
    named = env.get(CALIBRATION_ENV, "").strip()
    if named:
        return None if named == NO_CALIBRATION else Path(named)
    return default_calibration_path(env)


def latest_calibration(environ: Mapping[str, str] | None = None) -> tuple[Path, Calibration] | None:
    """The latest certificate and its path; None when nothing is at the default place. ConfigFileError
    (`read_calibration`) when a named file is missing, or what is there is no certificate (a FIFO, a
    folder, a broken file)."""
    env = os.environ if environ is None else environ
    path = latest_calibration_path(env)
    if path is None:
        return None
    if not os.path.lexists(path) and not env.get(CALIBRATION_ENV, "").strip():
        return None
    return path, read_calibration(path)


def unreadable_line(error: ConfigFileError) -> str:
    """A certificate's problems on one line: the file once, then up to WARNED_PROBLEMS of them (key:
    what was expected) and how many more."""
    problems = error.problems
    file = problems[0].file if problems else "the calibration certificate"
    shown = "; ".join(" ".join(f"{p.key_path}: {p.message}".split()) for p in problems[:WARNED_PROBLEMS])
    more = f" (and {len(problems) - WARNED_PROBLEMS} more)" if len(problems) > WARNED_PROBLEMS else ""
    return f"{file}: {shown}{more}"


def peak_rate_rps(shape: Any) -> float | None:
    """The highest rate an open-loop shape asks for (all processes together); None for closed loop."""
    rates = [getattr(shape, key, None) for key in ("rate", "from_rate", "to_rate", "base_rate", "burst_rate")]
    found = [float(r) for r in rates if isinstance(r, (int, float)) and not isinstance(r, bool)]
    return max(found) if found else None


def protocol_of(kind: str) -> str:
    """A target kind's wire protocol as the certificate names it: grpc or http."""
    return "grpc" if "grpc" in kind else "http"


def calibration_at_start(
    scenario: Any, processes: int, transport: str | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """Read the latest certificate, warn when the run's peak rate per process exceeds its roofline
    for a protocol the run uses; summary.json's ``calibration`` (None: no certificate applies)."""
    try:
        found = latest_calibration(environ)
    except ConfigFileError as error:
        logger.warning("the calibration certificate cannot be used: %s: this run goes on uncalibrated", unreadable_line(error))
        return None
    if found is None:
        return None
    path, certificate = found
    protocols = sorted({protocol_of(str(target.kind)) for target in scenario.targets})
    peak = peak_rate_rps(scenario.shape)
    per_process = None if peak is None else peak / max(1, processes)
    rooflines = {p: certificate.roofline_rps_per_process(p) for p in protocols}
    above = []
    untested: dict[str, float] = {}  # protocol -> the lowest rate tested, above this run's
    for protocol, roofline in rooflines.items():
        if per_process is None:
            continue
        lowest = certificate.lowest_tested_rps_per_process(protocol)
        if lowest is not None and per_process < lowest:
            untested[protocol] = lowest  # nothing measured there: neither certified nor refused
        elif roofline is None:
            logger.warning(
                "the calibration certificate %s certifies no %s rate on this machine (%s): figures at %.0f req/s per "
                "process are not certified",
                path,
                protocol,
                "no rate tested" if lowest is None else f"every tested rate from {lowest:g} req/s per process up missed a bound",
                per_process,
            )
        elif per_process > roofline:
            above.append(protocol)
            logger.warning(
                "the configured load (%.0f req/s per process over %s) exceeds this machine's calibrated roofline (%.0f req/s "
                "per process, %s): the generator, not the server, would be the limit at this rate: add workers",
                per_process,
                protocol,
                roofline,
                path,
            )
    if untested:
        logger.info(
            "the calibration certificate %s tested no rate as low as this run's %.0f req/s per process (%s): "
            "figures at this rate are not certified, nor warned about",
            path,
            per_process,
            ", ".join(f"{protocol} from {lowest:g} req/s per process up" for protocol, lowest in untested.items()),
        )
    if transport is not None and transport != certificate.transport:
        logger.warning(
            "the calibration certificate %s certified the %s transport; this run uses the %s transport",
            path,
            certificate.transport,
            transport,
        )
    return {
        "path": str(path),
        "created_at": certificate.created_at,
        "transport": certificate.transport,
        "roofline_rps_per_process": rooflines,
        "configured_rps_per_process": None if per_process is None else round(per_process, 3),
        "above_roofline": above,
    }
