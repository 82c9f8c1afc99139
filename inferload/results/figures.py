"""The one list of a target's figures: name, label, unit, where it is in summary.json, which way is
better, and how it is printed. The console table, report.html, `inferload compare` and the SLO
checks all take their figures from here (each view picks the names it shows).

A figure is read from a target summary (`TargetSummary`) or its JSON form (a dict), so views
work on hand-made dicts too; a figure that is missing or not a number reads as None (n/a).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

Better = Literal["lower", "higher"]


def value_at(item: Any, path: tuple[str, ...]) -> Any:
    """The value at a key path in a summary part (a model or its JSON form); None when absent."""
    value = item
    for key in path:
        if isinstance(value, Mapping):
            value = value.get(key)
        elif isinstance(value, BaseModel):
            value = getattr(value, key, None)
        else:
            return None
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Figure:
    name: str  # the key path in a target summary, dotted: "latency_ms.p99" (compare's names too)
    label: str  # "p99"
    unit: str | None  # "ms", "req/s", "s"; None for counts and ratios
    better: Better | None  # which way is an improvement (and the SLO bound: lower -> "<=", higher -> ">=")
    spec: str  # format in the console table and the report
    compare_spec: str  # format of the raw value in `inferload compare`
    server: bool = False  # measured by the server itself
    percent: bool = False  # a ratio, printed x100 with " %" in the table and the report

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.name.split("."))

    def value(self, target: Any) -> int | float | None:
        value = value_at(target, self.path)
        return value if is_number(value) else None

    def heading(self, unit_in_cell: bool = False) -> str:
        """'p99 (ms)', 'queue (ms, server)', 'avg batch (server)', 'error rate'."""
        notes = [self.unit] if self.unit and not unit_in_cell else []
        notes += ["server"] if self.server else []
        return f"{self.label} ({', '.join(notes)})" if notes else self.label

    def cell(self, target: Any, unit_in_cell: bool = False) -> str:
        """The figure as printed in the table and the report ('n/a' when missing)."""
        value = self.value(target)
        if value is None:
            return "n/a"
        if self.percent:
            return format(value * 100, self.spec) + " %"
        return format(value, self.spec) + (f" {self.unit}" if unit_in_cell and self.unit else "")


LATENCY_KEYS = ("mean", "p50", "p90", "p95", "p99", "p999", "max")

FIGURES: tuple[Figure, ...] = (
    Figure("requests", "requests", None, "higher", ".0f", ".0f"),
    Figure("failures", "failures", None, "lower", ".0f", ".0f"),
    Figure("error_rate", "error rate", None, "lower", ".2f", ".4g", percent=True),
    Figure("throughput_rps", "throughput", "req/s", "higher", ".1f", ".1f"),
    *(Figure(f"latency_ms.{key}", key, "ms", "lower", ".2f", ".3f") for key in LATENCY_KEYS),
    Figure("server_side.avg_batch_size", "avg batch", None, "higher", ".2f", ".2f", server=True),
    Figure("server_side.queue_ms_avg", "queue", "ms", "lower", ".3f", ".3f", server=True),
    Figure("server_side.compute_ms_avg", "compute", "ms", "lower", ".3f", ".3f", server=True),
    Figure("server_side.request_ms_avg", "request", "ms", "lower", ".3f", ".3f", server=True),
    Figure("residual_ms", "client − server", "ms", "lower", ".3f", ".3f"),
    Figure("cold_start_s", "cold start", "s", "lower", ".2f", ".2f"),
    # open-loop runs only
    Figure("open_loop.configured_rps", "target rate", "req/s", None, ".1f", ".1f"),
    Figure("open_loop.achieved_rps", "achieved rate", "req/s", "higher", ".1f", ".1f"),
    Figure("open_loop.unsent", "unsent arrivals", None, "lower", ".0f", ".0f"),
    Figure("open_loop.send_lag_ms.p99", "send lag p99", "ms", "lower", ".3f", ".3f"),
    # streamed targets only (decoupled Triton models over the gRPC stream): summary.json's `decoupled`
    Figure("decoupled.responses_per_request", "responses / request", None, None, ".2f", ".3f"),
    Figure("decoupled.responses_per_s", "responses", "resp/s", "higher", ".1f", ".1f"),
    Figure("decoupled.first_response_ms.p50", "first response p50", "ms", "lower", ".2f", ".3f"),
    Figure("decoupled.first_response_ms.p99", "first response p99", "ms", "lower", ".2f", ".3f"),
    Figure("decoupled.inter_response_ms.p50", "between responses p50", "ms", "lower", ".2f", ".3f"),
    Figure("decoupled.inter_response_ms.p99", "between responses p99", "ms", "lower", ".2f", ".3f"),
    # generative targets only (the engine read their streams): summary.json's `generation`
    Figure("generation.output_tokens_per_request", "output tokens / request", None, None, ".1f", ".2f"),
    Figure("generation.output_tokens_per_s", "output tokens", "tok/s", "higher", ".1f", ".1f"),
    Figure("generation.tpot_ms.p50", "time per output token p50", "ms", "lower", ".2f", ".3f"),
    Figure("generation.tpot_ms.p99", "time per output token p99", "ms", "lower", ".2f", ".3f"),
    Figure("generation.itl_ms.p50", "inter-token p50", "ms", "lower", ".2f", ".3f"),
    Figure("generation.itl_ms.p99", "inter-token p99", "ms", "lower", ".2f", ".3f"),
    Figure("generation.server.prefill_ms.p50", "server prefill p50", "ms", "lower", ".2f", ".3f", server=True),
    Figure("generation.server.decode_ms_per_token.p50", "server decode / token p50", "ms", "lower", ".2f", ".3f", server=True),
    Figure("generation.server.ttft_residual_ms.p50", "TTFT client − server p50", "ms", "lower", ".2f", ".3f"),
    Figure("generation.server.ttft_residual_ms.p99", "TTFT client − server p99", "ms", "lower", ".2f", ".3f"),
    Figure("generation.ttft_from_intended_ms.p50", "TTFT from intended send p50", "ms", "lower", ".2f", ".3f"),
    Figure("generation.ttft_from_intended_ms.p99", "TTFT from intended send p99", "ms", "lower", ".2f", ".3f"),
    Figure("generation.goodput.per_s", "goodput", "req/s", "higher", ".1f", ".2f"),
    Figure("generation.goodput.attainment_pct", "goodput attainment", "%", "higher", ".1f", ".2f"),
    Figure("generation.token_count.difference_pct", "tokens: tokenizer − usage", "%", None, ".2f", ".3f"),
    Figure("generation.token_count.differing", "requests counted differently", None, "lower", ".0f", ".0f"),
    Figure("generation.lengths.input_tokens.mean", "prompt tokens (mean)", None, None, ".1f", ".2f"),
    Figure("generation.lengths.output_tokens_asked.mean", "output tokens asked (mean)", None, None, ".1f", ".2f"),
    Figure("generation.lengths.output_tokens_achieved_pct", "output tokens achieved", "%", None, ".1f", ".2f"),
    Figure("open_loop.burstiness.sent_cv", "burstiness sent (CV)", None, None, ".2f", ".3f"),
    Figure("open_loop.burstiness.scheduled_cv", "burstiness scheduled (CV)", None, None, ".2f", ".3f"),
)

BY_NAME: dict[str, Figure] = {f.name: f for f in FIGURES}


def figures(*names: str) -> tuple[Figure, ...]:
    """The named figures, in the order given (KeyError for a name not in FIGURES)."""
    return tuple(BY_NAME[name] for name in names)


#: what each view shows
TABLE = figures(
    "requests",
    "failures",
    "error_rate",
    "throughput_rps",
    "latency_ms.p50",
    "latency_ms.p95",
    "latency_ms.p99",
    "latency_ms.max",
    "server_side.avg_batch_size",
    "server_side.queue_ms_avg",
    "server_side.compute_ms_avg",
    "cold_start_s",
)
REPORT = figures(
    "requests",
    "failures",
    "error_rate",
    "throughput_rps",
    *(f"latency_ms.{key}" for key in LATENCY_KEYS),
    "server_side.avg_batch_size",
    "server_side.queue_ms_avg",
    "server_side.compute_ms_avg",
    "server_side.request_ms_avg",
    "residual_ms",
    "cold_start_s",
)
#: added to the console table and the report when a target ran open loop (summary.json's `open_loop`)
OPEN_LOOP = figures("open_loop.configured_rps", "open_loop.achieved_rps", "open_loop.unsent", "open_loop.send_lag_ms.p99")
#: the report's open-loop figures: `OPEN_LOOP` and the burstiness (the console prints it on a line of its own)
REPORT_OPEN_LOOP = OPEN_LOOP + figures("open_loop.burstiness.sent_cv", "open_loop.burstiness.scheduled_cv")
#: added to the console table, the report and compare when a target streamed (a decoupled model)
STREAMING = figures(
    "decoupled.responses_per_request",
    "decoupled.responses_per_s",
    "decoupled.first_response_ms.p50",
    "decoupled.first_response_ms.p99",
    "decoupled.inter_response_ms.p50",
    "decoupled.inter_response_ms.p99",
)
#: added after `STREAMING` when a target generated (summary.json's `generation`)
GENERATION = figures(
    "generation.output_tokens_per_request",
    "generation.output_tokens_per_s",
    "generation.tpot_ms.p50",
    "generation.tpot_ms.p99",
    "generation.itl_ms.p50",
    "generation.itl_ms.p99",
)
#: added after `GENERATION` when a target sets goodput thresholds (`generation.goodput`)
GOODPUT = figures("generation.goodput.per_s", "generation.goodput.attainment_pct")
#: added after `GENERATION` when a target draws its lengths (`generation.lengths`)
LENGTHS = figures(
    "generation.lengths.input_tokens.mean",
    "generation.lengths.output_tokens_asked.mean",
    "generation.lengths.output_tokens_achieved_pct",
)
#: added after `GENERATION` when a target's tokenizer counted beside the server's usage (`generation.token_count`)
TOKEN_COUNT = figures("generation.token_count.difference_pct", "generation.token_count.differing")
#: added after `GENERATION` in open loop (`generation.ttft_from_intended_ms`)
GENERATION_OPEN_LOOP = figures("generation.ttft_from_intended_ms.p50", "generation.ttft_from_intended_ms.p99")
#: added after them when a server sent its own times (`generation.server`: llama.cpp's `timings`)
GENERATION_SERVER = figures(
    "generation.server.prefill_ms.p50",
    "generation.server.decode_ms_per_token.p50",
    "generation.server.ttft_residual_ms.p50",
    "generation.server.ttft_residual_ms.p99",
)
COMPARE = figures(
    "requests",
    "failures",
    "error_rate",
    "throughput_rps",
    *(f"latency_ms.{key}" for key in LATENCY_KEYS),
    "server_side.avg_batch_size",
    "server_side.queue_ms_avg",
    "server_side.compute_ms_avg",
    "cold_start_s",
)


def server_side_notes(name: str, target: Any) -> list[str]:
    """What a reader must know about a target's server figures: that they are its model's, shared
    with other targets (``server_side.shared_with``), which ones the server does not report and why
    (``server_side.unknown``)."""
    side = value_at(target, ("server_side",))
    notes: list[str] = []
    if side is None:
        return notes
    shared = value_at(side, ("shared_with",))
    if shared:
        model = value_at(target, ("model",))
        notes.append(
            f"{name}: server-side figures cover all targets of model {model!r} on its server together "
            f"(shared with {', '.join([*shared])}): the server cannot split them per target"
        )
    unknown = value_at(side, ("unknown",))
    for key, reason in (unknown or {}).items():
        figure = BY_NAME.get(f"server_side.{key}")
        label = figure.heading() if figure is not None else key
        notes.append(f"{name}: {label}: not reported by this server: {reason}")
    return notes


#: the turns of a conversation the console and the report list (the rest are in summary.json)
TURNS_SHOWN = 10


def turn_notes(name: str, target: Any) -> list[str]:
    """A target's conversations by turn (``generation.turns``): each turn's time to the first token
    and the prompt tokens the server counted, one line each for the first `TURNS_SHOWN`."""
    turns = value_at(target, ("generation", "turns")) or []
    notes = []
    for turn in turns[:TURNS_SHOWN]:
        p50, p99 = value_at(turn, ("ttft_ms", "p50")), value_at(turn, ("ttft_ms", "p99"))
        prompt = value_at(turn, ("prompt_tokens", "mean"))
        times = f"TTFT p50 {p50:.2f} ms, p99 {p99:.2f} ms" if is_number(p50) and is_number(p99) else "TTFT n/a"
        tokens = f", prompt tokens {prompt:.0f} (mean, the server's count)" if is_number(prompt) else ""
        notes.append(f"{name}: turn {value_at(turn, ('turn',))}: {value_at(turn, ('generations',))} generations, {times}{tokens}")
    if len(turns) > TURNS_SHOWN:
        notes.append(f"{name}: {len(turns) - TURNS_SHOWN} more turns in summary.json (generation.turns)")
    return notes


def unsent_notes(name: str, target: Any) -> list[str]:
    """An open-loop target's arrivals that were not sent (``open_loop.unsent``): how many, and what
    that means for its figures."""
    unsent, arrivals = value_at(target, ("open_loop", "unsent")), value_at(target, ("open_loop", "arrivals"))
    if not is_number(unsent) or not unsent or not is_number(arrivals) or not arrivals:
        return []
    return [
        f"{name}: {unsent:,.0f} of {arrivals:,.0f} arrivals unsent ({100 * unsent / arrivals:.1f} %): they found every"
        " sender busy and the waiting queue full (shape.max_in_flight, max_queue) or were still waiting at the end;"
        " the target rate was not offered (a max_unsent SLO fails the run on them)"
    ]


def streamed(*targets: Any) -> bool:
    """Whether any of these targets has stream figures (summary.json's `decoupled`)."""
    return any(value_at(target, ("decoupled",)) is not None for target in targets)


def stream_figures_of(*targets: Any) -> tuple[Figure, ...]:
    """The figures shown beside the others for these targets: `STREAMING` when one streamed,
    `GENERATION` after it when one generated, `GENERATION_OPEN_LOOP` when one was sent in open loop,
    `GOODPUT` when one measured goodput, `TOKEN_COUNT` when a tokenizer counted beside the server,
    `LENGTHS` when one drew its lengths, `GENERATION_SERVER` when a server sent its own times."""

    def some(*path: str) -> bool:
        return any(value_at(target, path) is not None for target in targets)

    shown = STREAMING if streamed(*targets) else ()
    shown += GENERATION if some("generation") else ()
    shown += GENERATION_OPEN_LOOP if some("generation", "ttft_from_intended_ms") else ()
    shown += GOODPUT if some("generation", "goodput") else ()
    shown += TOKEN_COUNT if some("generation", "token_count") else ()
    shown += LENGTHS if some("generation", "lengths") else ()
    return shown + (GENERATION_SERVER if some("generation", "server") else ())


def format_table(targets: Mapping[str, Any], shown: tuple[Figure, ...] | None = None) -> str:
    """Side-by-side figures for the console, one column per target, and the notes below it: on server
    figures (shared by targets of one model, not reported by the server), an open-loop target's unsent
    arrivals and a conversation's turns. By default the `TABLE` figures, `OPEN_LOOP` when a target ran
    open loop, and `stream_figures_of` the targets."""
    names = list(targets)
    if not names:
        return "(no targets)"
    if shown is None:
        open_loop = any(value_at(target, ("open_loop",)) is not None for target in targets.values())
        shown = TABLE + (OPEN_LOOP if open_loop else ()) + stream_figures_of(*targets.values())
    rows: list[tuple[str, ...]] = [("", *names)]
    rows += [(figure.heading(), *(figure.cell(targets[n]) for n in names)) for figure in shown]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    notes = [
        note
        for n in names
        for note in (*server_side_notes(n, targets[n]), *unsent_notes(n, targets[n]), *turn_notes(n, targets[n]))
    ]
    return "\n".join(lines + [f"  {note}" for note in notes])


def format_burstiness(targets: Mapping[str, Any]) -> str | None:
    """The open-loop line on burstiness: each target's CV of the gaps between sends, next to the
    schedule's; None when no target ran open loop."""
    parts = []
    for name, target in targets.items():
        sent = value_at(target, ("open_loop", "burstiness", "sent_cv"))
        scheduled = value_at(target, ("open_loop", "burstiness", "scheduled_cv"))
        if value_at(target, ("open_loop",)) is None:
            continue
        sent_text = "n/a" if not is_number(sent) else f"{sent:.2f}"
        scheduled_text = "n/a" if not is_number(scheduled) else f"{scheduled:.2f}"
        parts.append(f"{name} {sent_text} (scheduled {scheduled_text})")
    if not parts:
        return None
    return "burstiness sent (CV of the gaps between sends, all workers; Poisson 1, evenly spaced 0): " + ", ".join(parts)
