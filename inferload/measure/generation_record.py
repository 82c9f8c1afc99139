"""Generations' own figures (the generative kinds), mergeable: what the engine measured of each
successful generation, per window and target, and over the steady state per target.

The engine (``native/src/engine/generation.rs``) defines each generation's figures once, from its
content events: the time to the second token (TTST), the time per output token (TPOT: last content
- first content, over N - 1 tokens), the inter-token latencies (each gap between content events
shared by the tokens of the later event: token-weighted), and N, the output tokens (the server's
``usage``, else a tokenizer's count, else one per event), with where N came from. The time to the
first token and the gaps between events are the stream figures (`decoupled_record`).

When the server sent its own times (llama.cpp's ``timings``), the engine joins them to the client's
per request: the server's prefill, its decode time per token, and the client's TTFT minus the
server's prefill (the TTFT residual, floored at 0). In open loop, the time to the first token is
also taken from each arrival's intended send (TTFT plus the send lag): what a user arriving then
waited, the generator's own delay included.

A generation is good when it met every goodput threshold of its target (``generation.goodput``:
TTFT, TPOT, E2E per request), judged by the engine as it ends; goodput counts the good ones.

Per window: each generation's TPOT and its inter-token latencies (`WindowStore`s, old windows
compressed) and the generations, their output tokens, the good ones and those judged (their target
sets goodput thresholds), for windows.csv and InfluxDB. Histograms are HDR, so workers' figures
merge exactly: the engine's drain hands them over as ``{"tpot": [[index, target, wire stats]], "itl": [...],
"counts": [[index, target, [generations, tokens, good, judged]]], "steady": {target: {"ttst", "tpot", "itl":
"server_prefill", "server_decode", "ttft_residual", "ttft_intended": wire stats, "n": [generations, tokens, most tokens
of one, by usage, by tokenizer, by events, good, counted by both usage and the tokenizer, of those differing,
their tokens by the tokenizer, their tokens by usage]}}, "turns": [[target, turn, [ttft wire stats, [prompt
tokens counted, sum, min, max]]]]}`` (conversations' turns, steady state), the same form a worker's report carries.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from inferload.measure.hdr import ClosedStats, LatencyStats, WindowStats
from inferload.measure.windows import WindowStore

WindowKey = tuple[int, str]

#: where N came from, in the order of their counts on the wire
TOKEN_SOURCES = ("usage", "tokenizer", "events")


@dataclass
class TokenCountCheck:
    """The generations counted both by the server's ``usage`` and by the target's tokenizer: how many,
    how many of them the two counts differ on, and the tokens each counted over them."""

    compared: int = 0
    differing: int = 0
    tokenizer_tokens: int = 0
    usage_tokens: int = 0

    def to_wire(self) -> list[int]:
        return [self.compared, self.differing, self.tokenizer_tokens, self.usage_tokens]

    def add_wire(self, counts: list[int]) -> None:
        """Adds a wire's four counts (none from an engine that sent fewer)."""
        compared, differing, tokenizer_tokens, usage_tokens = (*counts, 0, 0, 0, 0)[:4]
        self.compared += compared
        self.differing += differing
        self.tokenizer_tokens += tokenizer_tokens
        self.usage_tokens += usage_tokens


@dataclass
class GenerationCounts:
    """Generations that succeeded, their output tokens, the most one had, how each was counted, the
    good ones (met the target's goodput thresholds), and the tokenizer's counts beside the server's."""

    generations: int = 0
    output_tokens: int = 0
    max_output_tokens: int = 0
    by_source: list[int] = field(default_factory=lambda: [0] * len(TOKEN_SOURCES))
    good: int = 0
    token_check: TokenCountCheck = field(default_factory=TokenCountCheck)

    def add_wire(self, counts: list[int]) -> None:
        generations, tokens, most, *rest = (int(x) for x in counts)
        self.generations += generations
        self.output_tokens += tokens
        self.max_output_tokens = max(self.max_output_tokens, most)
        for index, count in enumerate(rest[: len(TOKEN_SOURCES)]):
            self.by_source[index] += count
        self.good += sum(rest[len(TOKEN_SOURCES) : len(TOKEN_SOURCES) + 1])
        self.token_check.add_wire(rest[len(TOKEN_SOURCES) + 1 :])

    def to_wire(self) -> list[int]:
        return [
            self.generations,
            self.output_tokens,
            self.max_output_tokens,
            *self.by_source,
            self.good,
            *self.token_check.to_wire(),
        ]

    @property
    def token_source(self) -> str | None:
        """How N was counted: one source's name, ``mixed`` when requests differed, None with no generation."""
        used = [name for name, count in zip(TOKEN_SOURCES, self.by_source, strict=True) if count]
        if not used:
            return None
        return used[0] if len(used) == 1 else "mixed"


@dataclass
class GenerationTotals:
    """One target's generations over the steady state."""

    ttst: LatencyStats = field(default_factory=LatencyStats)
    tpot: LatencyStats = field(default_factory=LatencyStats)
    itl: LatencyStats = field(default_factory=LatencyStats)
    #: the server's own times, of the generations it sent them for
    server_prefill: LatencyStats = field(default_factory=LatencyStats)
    server_decode: LatencyStats = field(default_factory=LatencyStats)
    ttft_residual: LatencyStats = field(default_factory=LatencyStats)
    #: open loop: the time to the first token from each arrival's intended send
    ttft_intended: LatencyStats = field(default_factory=LatencyStats)
    counts: GenerationCounts = field(default_factory=GenerationCounts)

    def _histograms(self) -> dict[str, LatencyStats]:
        return {
            "ttst": self.ttst,
            "tpot": self.tpot,
            "itl": self.itl,
            "server_prefill": self.server_prefill,
            "server_decode": self.server_decode,
            "ttft_residual": self.ttft_residual,
            "ttft_intended": self.ttft_intended,
        }

    def to_wire(self) -> dict[str, Any]:
        return {**{key: stats.to_wire() for key, stats in self._histograms().items()}, "n": self.counts.to_wire()}

    def merge_wire(self, data: dict[str, Any]) -> None:
        for key, into in self._histograms().items():
            if key not in data:
                continue
            stats = LatencyStats.from_wire(data[key])
            into.merge(stats)
            stats.release()
        self.counts.add_wire(data["n"])

    def release(self) -> None:
        for stats in self._histograms().values():
            stats.release()


@dataclass
class TurnTotals:
    """One turn position of a target's conversations over the steady state: its successful
    generations' time to the first token, and the prompt tokens the server counted for them (its
    ``usage``: a later turn carries the history), [generations counted, sum, min, max]. The engine
    records them (record.rs's ``TurnTotals``); here they are merged from its drains and workers'."""

    ttft: LatencyStats = field(default_factory=LatencyStats)
    prompt_tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0])

    def _add_tokens(self, added: list[int]) -> None:
        counted, total, low, high = self.prompt_tokens
        if not added[0]:
            return
        self.prompt_tokens = [
            counted + added[0],
            total + added[1],
            added[2] if not counted else min(low, added[2]),
            added[3] if not counted else max(high, added[3]),
        ]

    def to_wire(self) -> list[Any]:
        return [self.ttft.to_wire(), list(self.prompt_tokens)]

    def merge_wire(self, data: list[Any]) -> None:
        stats = LatencyStats.from_wire(data[0])
        self.ttft.merge(stats)
        stats.release()
        self._add_tokens([int(v) for v in data[1]])


@dataclass(frozen=True)
class GenerationWindow:
    """What a window holds of one target's generations (read-only)."""

    tpot: WindowStats
    generations: int
    output_tokens: int
    good: int
    #: generations judged for goodput (0: the target sets no thresholds, or none succeeded)
    judged: int
    #: the inter-token latencies (token-weighted) of the generations that ended in the window
    itl: WindowStats = field(default_factory=ClosedStats.empty)


@dataclass
class GenerationRecord:
    """A run's generations: per window and target, and steady-state totals per target."""

    tpot_windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    itl_windows: WindowStore[WindowKey] = field(default_factory=WindowStore)
    #: [generations, output tokens, good, judged] per window
    count_windows: dict[WindowKey, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0]))
    steady: dict[str, GenerationTotals] = field(default_factory=lambda: defaultdict(GenerationTotals))
    #: targets that had at least one generation (kept when the record is drained)
    targets: set[str] = field(default_factory=set)
    #: conversations (``generation.conversation``): each turn position's figures, by (target, turn from 1)
    turns: dict[tuple[str, int], TurnTotals] = field(default_factory=lambda: defaultdict(TurnTotals))

    def window(self, key: WindowKey) -> GenerationWindow | None:
        """The window's generation figures; None when no generation finished in it."""
        counts = self.count_windows.get(key)
        if counts is None:
            return None
        empty = ClosedStats.empty()
        generations, tokens, good, judged = counts[:4]
        return GenerationWindow(
            self.tpot_windows.get(key, empty), generations, tokens, good, judged, self.itl_windows.get(key, empty)
        )

    def close_before(self, index: int) -> int:
        """Compress every window older than `index` (see `WindowStore.close_before`)."""
        return self.tpot_windows.close_before(index) + self.itl_windows.close_before(index)

    @property
    def open_histograms(self) -> int:
        return self.tpot_windows.open_count + self.itl_windows.open_count

    def drain_to_wire(self) -> dict[str, Any]:
        """Everything gathered since the last call, as plain data; leaves it empty."""
        wire = {
            "tpot": [[index, target, stats.to_wire()] for (index, target), stats in self.tpot_windows.items()],
            "itl": [[index, target, stats.to_wire()] for (index, target), stats in self.itl_windows.items()],
            "counts": [[index, target, list(counts)] for (index, target), counts in self.count_windows.items()],
            "steady": {target: totals.to_wire() for target, totals in self.steady.items()},
            "turns": [[target, turn, totals.to_wire()] for (target, turn), totals in self.turns.items()],
        }
        for totals in self.steady.values():
            totals.release()
        for turn_totals in self.turns.values():
            turn_totals.ttft.release()
        self.turns.clear()
        self.tpot_windows.clear()
        self.itl_windows.clear()
        self.count_windows.clear()
        self.steady.clear()
        return wire

    def merge_wire(self, wire: dict[str, Any]) -> None:
        for key, windows in (("tpot", self.tpot_windows), ("itl", self.itl_windows)):
            for index, target, data in wire.get(key, []):
                stats = LatencyStats.from_wire(data)
                windows.writable((int(index), target)).merge(stats)
                stats.release()
        for index, target, added in wire.get("counts", []):
            counts = self.count_windows[(int(index), target)]
            for position, count in enumerate(added[:4]):
                counts[position] += int(count)
            self.targets.add(target)
        for target, data in wire.get("steady", {}).items():
            self.steady[target].merge_wire(data)
            self.targets.add(target)
        for target, turn, data in wire.get("turns", []):
            self.turns[(target, int(turn))].merge_wire(data)
