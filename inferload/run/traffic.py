"""Traffic inside Locust: the shape that plays a scenario's user-count timeline (``ScenarioShape``),
and open-loop arrivals on the clock.

On every Locust process that runs users, one scheduler greenlet iterates the run's arrival law
(`inferload.traffic.arrivals`: the whole run's arrivals, every target, in time order, the same
stream on every process from one seed), keeps this process's part of it (`take_share`: arrival i
is process i mod n's), waits for each one's intended send time and offers it to its target's
`ArrivalQueue`. The target's users are the senders: each takes the next arrival, sends it, and
reports latency from the *intended* send time, so a slow server cannot hide its queue
(coordinated omission). An arrival that finds every sender busy waits; one that finds the
waiting queue full (`max_queue`) is counted as unsent, as are arrivals still waiting when the
run stops, and those due before the stop that the scheduler never reached (a starved process).
Nothing is lost silently.

The master tells every worker its split, the run's seed and its start (`SHARE_MESSAGE`), at test
start and again when the live workers change (a worker went missing); a new split applies from
the next arrival. A target whose calls go through the native engine (``inferload.users.engine``)
is not offered its arrivals one by one: the scheduler hands them to its `ArrivalFeed` in batches,
``FEED_AHEAD_S`` ahead of their intended times, every ``FEED_EVERY_S``, and the engine paces them
(and counts them as they fall due, and the unsent). Either way the same stream and the same split,
and the same counts: at the stop, a fed target's arrivals due by then that the engine was never
handed (drawn and not handed over yet, or never drawn) are counted unsent here, as a queued
target's are; those not due yet are dropped uncounted, by the engine as here.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import gevent
from locust import LoadTestShape
from locust.env import Environment
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner

from inferload.measure.run_record import RunRecord
from inferload.measure.windows import StabilityRule, WindowFigures, first_stable_run
from inferload.run.workers import quit_workers
from inferload.scenario.replay_file import ReplayFileError
from inferload.scenario.schema import Scenario
from inferload.traffic.arrivals import Arrival, ArrivalLaw, ProcessSplit, take_share
from inferload.traffic.shapes import Timeline, timeline_for
from inferload.users.base import ArrivalQueue


# `--stop-when-stable N,P`: end a run once N consecutive steady windows agree within ±P %.
#
# The rule is perf_analyzer's (`inferload.measure.windows`): each target's throughput and p99 of
# N consecutive windows after the warm-up are within ±P % of their mean. A window counts once it is
# complete: its end has passed, and on a master also one worker report interval more, so the workers'
# figures for it have arrived. When every target is stable the run ends as at the end of its timeline
# (the shape's next tick returns None), so the results are written exactly as for a run that ran its
# course; the scenario's duration stays the upper bound (the maximum number of windows).
def parse_stop_when_stable(text: str) -> StabilityRule:
    """``N,P`` (windows, tolerance %) as a rule; ValueError with a message on anything else."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got {text!r}")
    try:
        windows, tolerance = int(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--stop-when-stable takes WINDOWS,PERCENT (e.g. 3,10); got {text!r}") from None
    try:
        return StabilityRule(windows=windows, tolerance_pct=tolerance, max_windows=max(windows, 1))
    except ValueError as error:
        raise ValueError(f"--stop-when-stable {text!r}: {error}") from None


@dataclass
class StableStop:
    """Watches the run's windows and ends the run when every target is stable."""

    environment: Environment
    record: RunRecord
    rule: StabilityRule
    targets: tuple[str, ...]
    stable_since: dict[str, float] | None = None

    def complete_windows(self, now: float) -> dict[str, list[WindowFigures]]:
        """Each target's steady windows that are complete at `now`, oldest first."""
        warmup_ends = self.record.warmup_ends_at
        if warmup_ends is None:
            return {}
        lag_s = WORKER_REPORT_INTERVAL + 0.5 if isinstance(self.environment.runner, MasterRunner) else 0.1
        window_s = self.record.window_s
        by_target: dict[str, list[WindowFigures]] = {target: [] for target in self.targets}
        for (index, target), stats in self.record.all_windows():
            start = index * window_s
            if target not in by_target or start < warmup_ends or start + window_s + lag_s > now:
                continue
            p99 = stats.latency_ms()["p99"] if stats.requests else None
            by_target[target].append(WindowFigures(stats.requests / window_s, p99))
        return by_target

    def check(self, now: float) -> bool:
        """True (and the run told to end) when every target has a stable run of windows."""
        windows = self.complete_windows(now)
        if not windows:
            return False
        starts = {target: first_stable_run(figures, self.rule) for target, figures in windows.items()}
        if any(start is None for start in starts.values()):
            return False
        self.stable_since = {
            target: round(self.record.window_s * start, 3) for target, start in starts.items() if start is not None
        }
        shape = self.environment.shape_class
        if isinstance(shape, ScenarioShape):
            shape.ended_early = True
        logger.info(
            "stable: %d windows within ±%g %% for every target; ending the run", self.rule.windows, self.rule.tolerance_pct
        )
        return True

    def watch(self) -> None:
        """Greenlet body: check twice a window until stable or the run ends."""
        while not self.check(time.time()):
            gevent.sleep(self.record.window_s / 2)


logger = logging.getLogger(__name__)

SHARE_MESSAGE = "inferload_open_loop_share"
#: arrivals a scheduler offers in a row while behind before it lets the senders (and Locust) run
YIELD_EVERY = 100
#: a native feed gets its arrivals this far ahead of their intended times, this often
FEED_AHEAD_S = 0.5
FEED_EVERY_S = 0.1


class ArrivalFeed(Protocol):
    """Where a target's arrivals go when the native engine paces them (``inferload.users.engine``):
    given ahead of time in batches; the engine counts them as they fall due, and the unsent."""

    def feed(self, intended: list[float], samples: list[int | None] | None = None) -> None:
        """Arrivals at these wall-clock times (ascending), each with the data-set sample it sends (a
        replay file's `sample`; None, or no list: the target's own rotation)."""

    def end(self) -> None:
        """The run stops: arrivals not yet due are dropped, those still waiting count as unsent."""

    def starts(self, started_at: float) -> None:
        """The run's schedule, and its warm-up, count from this wall-clock instant (on a worker the
        master's start, not the worker's own)."""


class ArrivalScheduler:
    """Draws the run's arrivals and offers this process's to their targets' queues, from test start to stop."""

    def __init__(
        self,
        law: ArrivalLaw,
        queues: Mapping[str, ArrivalQueue],
        record: RunRecord,
        feeds: Mapping[str, ArrivalFeed] | None = None,
    ) -> None:
        self.law = law
        self.queues = dict(queues)
        self.record = record
        #: the targets the native engine paces (their arrivals are fed ahead, not queued)
        self.feeds = dict(feeds or {})
        self.split = ProcessSplit()
        self.seed: int | None = None  # the run's seed; None: not known yet (a worker waits for the master's word)
        #: the run's start (wall clock) the master sent; None: this process's own test start
        self.run_started_at: float | None = None
        #: a worker: the split, seed and start come from the master, anew for every test
        self.from_master = False
        self._greenlet: gevent.Greenlet | None = None
        #: this test's stream (this process's share), where it started, and the arrival drawn from it
        #: and not offered yet: what the stop counts when the scheduler never reached some due arrivals
        self._stream: Iterator[Arrival] | None = None
        self._stream_start = 0.0
        self._holding: Arrival | None = None
        #: drawn for a feed and not handed over yet (intended times and samples, per fed target)
        self._fed: dict[str, _Drawn] = {name: _Drawn() for name in self.feeds}

    def set_process_share(self, workers: int, index: int, seed: int, started_at: float | None = None) -> None:
        """This process is ``index`` of ``workers`` (from the next arrival on: may change mid-run)."""
        self.split.workers = max(1, workers)
        self.split.index = index
        self.seed = seed
        self.run_started_at = started_at

    def start(self, started_at: float) -> None:
        self._kill()
        self._greenlet = gevent.spawn(self._run, started_at)

    def stop(self) -> None:
        """Stop drawing; arrivals still waiting for a sender are counted as unsent, and so are the
        arrivals due before now that the scheduler never reached (its process was starved)."""
        self._kill()
        now = time.time()
        for name, drawn in self._fed.items():  # drawn, never handed to the engine
            for intended in drawn.times:
                if intended <= now:
                    self.record.record_arrival(name, intended)
                    self.record.record_unsent(name, intended)
            drawn.clear()
        self._count_undrawn(now)
        for feed in self.feeds.values():
            feed.end()
        for name, queue in self.queues.items():
            for intended in queue.drain():
                self.record.record_unsent(name, intended)
        if self.from_master:  # the next test's split, seed and start come with the master's next word
            self.seed = None
            self.run_started_at = None

    def _kill(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _count_undrawn(self, now: float) -> None:
        """The rest of this process's share due by ``now``: arrivals the run's schedule had, counted unsent."""
        stream, holding = self._stream, self._holding
        self._stream, self._holding = None, None
        if stream is None:
            return
        default = next(iter(self.queues))
        try:
            for arrival in itertools.chain([holding] if holding is not None else [], stream):
                intended = self._stream_start + arrival.t_s
                if intended > now:
                    return
                target = arrival.target or default  # a fed target's too: the engine never had it
                self.record.record_arrival(target, intended)
                self.record.record_unsent(target, intended)
        except ValueError:  # the scheduler was stopped inside the stream (a replay reading): nothing to count
            logger.debug("open loop: arrivals due at the stop not counted (the stream was being read)")
        except ReplayFileError as error:
            logger.error("open loop: the replay stopped: %s", error)

    def _scheduled(self, arrivals: Iterator[Arrival], started_at: float, default: str) -> Iterator[Arrival]:
        """The whole schedule, each arrival noted (for its burstiness) before the split."""
        for arrival in arrivals:
            self.record.record_scheduled(arrival.target or default, started_at + arrival.t_s)
            yield arrival

    def _run(self, own_start: float) -> None:
        while self.seed is None:  # a worker waits for the master's word on its split and the seed
            gevent.sleep(0.01)
        started_at = own_start
        if self.run_started_at is not None:  # a worker: the schedule and its warm-up run on the master's clock
            started_at = self.record.started_at = self.run_started_at
        for feed in self.feeds.values():
            feed.starts(started_at)
        default = next(iter(self.queues))
        behind = 0  # arrivals offered in a row without sleeping
        fed = self._fed  # drawn for a feed, not handed over yet
        for drawn in fed.values():
            drawn.clear()
        fed_at = 0.0  # when the feeds were last handed their arrivals
        try:
            stream = take_share(self._scheduled(self.law.arrivals(self.seed), started_at, default), self.split)
            self._stream, self._stream_start = stream, started_at
            for arrival in stream:
                intended = started_at + arrival.t_s
                target = arrival.target or default
                if target in fed:  # the engine paces it: hand it over ahead, in batches
                    if intended - FEED_AHEAD_S > time.time():  # beyond the horizon: hand over, wait for the next turn
                        fed_at = self._hand_over(fed, fed_at)
                        self._holding = arrival  # drawn, not fed: the stop counts it if it falls due
                        gevent.sleep(max(intended - FEED_AHEAD_S - time.time(), fed_at + FEED_EVERY_S - time.time(), 0.0))
                        self._holding = None
                        behind = 0
                    elif intended <= time.time():  # already due: behind the clock
                        behind += 1
                        if behind >= YIELD_EVERY:  # far behind (a starved process): feed what is due, let Locust run
                            fed[target].add(intended, arrival.sample)
                            fed_at = self._hand_over(fed, fed_at)
                            gevent.sleep(0)
                            behind = 0
                            continue
                    fed[target].add(intended, arrival.sample)
                    continue
                delay = intended - time.time()
                if delay > 0:
                    fed_at = self._hand_over(fed, fed_at)
                    self._holding = arrival  # drawn, due later: the stop counts it if it falls due unsent
                    gevent.sleep(delay)
                    self._holding = None
                    behind = 0
                else:
                    behind += 1
                    if behind >= YIELD_EVERY:  # behind the clock: never starve the senders and Locust
                        gevent.sleep(0)
                        behind = 0
                self.record.record_arrival(target, intended)
                if not self.queues[target].offer(intended, arrival):
                    self.record.record_unsent(target, intended)
        except ReplayFileError as error:  # the file changed under the run: say so, send no more
            logger.error("open loop: the replay stopped: %s", error)
        self._hand_over(fed, fed_at)

    def _hand_over(self, fed: dict[str, _Drawn], fed_at: float) -> float:
        """Give each feed what was drawn for it; when that was (``fed_at`` when there was nothing)."""
        handed = False
        for name, drawn in fed.items():
            if drawn.times:
                samples = list(drawn.samples) if any(s is not None for s in drawn.samples) else None
                self.feeds[name].feed(list(drawn.times), samples)
                drawn.clear()
                handed = True
        return time.time() if handed else fed_at


@dataclass
class _Drawn:
    """Arrivals drawn for a feed and not handed over yet: their intended times and samples."""

    times: list[float] = field(default_factory=list)
    samples: list[int | None] = field(default_factory=list)

    def add(self, intended: float, sample: int | None) -> None:
        self.times.append(intended)
        self.samples.append(sample)

    def clear(self) -> None:
        self.times.clear()
        self.samples.clear()


class ScenarioShape(LoadTestShape):
    """Plays a scenario's timeline in Locust; `tick()` returning None ends the run."""

    abstract = True
    timeline: Timeline
    #: set on the running shape to end the run at the next tick, as the timeline's end would
    #: (`--stop-when-stable`: the run stops once its windows agree; see `inferload.run.traffic`)
    ended_early: bool = False

    def tick(self) -> tuple[int, float] | None:
        step = None if self.ended_early else self.timeline.at(self.get_run_time())
        if step is None:
            self._end_workers_first()
        return step

    def _end_workers_first(self) -> None:
        """A headless master's run ends with its workers' last reports in: the master stopped, then
        each worker told to quit and waited for (`run.workers.quit_workers`) before Locust's own
        quit, which waits 0.5 s for them and on a busy machine left a worker's last ~3 s out of
        every figure."""
        runner = self.runner
        options = runner.environment.parsed_options if runner is not None else None
        if isinstance(runner, MasterRunner) and options is not None and getattr(options, "headless", False):
            # stopped first, as Locust's own quit does (here, in the shape's greenlet, it stays alive):
            # a worker's quit to a running master makes it spread the users again over the workers
            # left and wait a second for their reports
            runner.stop(send_stop_to_client=False)
            quit_workers(runner)


def shape_class_for(scenario: Scenario) -> type[ScenarioShape]:
    """A concrete LoadTestShape class bound to the scenario's timeline (for a locustfile)."""
    return type(
        "ScenarioShape",
        (ScenarioShape,),
        {"abstract": False, "timeline": timeline_for(scenario), "__module__": __name__},
    )
