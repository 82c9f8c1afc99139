"""`attach_inference_tab`: the one call `inferload.run.plugin` makes (master or local runner with a
web UI). It gathers the live inputs from the run's parts each time the tab asks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from locust.env import Environment

from inferload.observe.sink.settings import SinkSettings
from inferload.scenario.model import Scenario
from inferload.webui.gpu import GpuWatch
from inferload.webui.live import LiveInputs, LocustError, phase_of
from inferload.webui.server_view import ServerReadings, server_views
from inferload.webui.tab import InferenceTab

if TYPE_CHECKING:
    from inferload.measure.run_record import RunRecord


def locust_errors(environment: Environment) -> list[LocustError]:
    """Locust's error table (merged over workers on a master) as plain rows."""
    runner = environment.runner
    if runner is None:
        return []
    return [LocustError(str(e.name), str(e.error), int(e.occurrences)) for e in runner.stats.errors.values()]


def attach_inference_tab(
    environment: Environment,
    scenario: Scenario,
    record: RunRecord,
    server_readings: Callable[[], ServerReadings],
    workers: Callable[[], int],
    influx: SinkSettings | None,
) -> InferenceTab | None:
    """The Inference tab on the environment's web UI (None when there is no web UI)."""
    if environment.web_ui is None:
        return None
    gpu = GpuWatch(influx)
    environment.events.test_start.add_listener(lambda **_: gpu.start())
    environment.events.quitting.add_listener(lambda **_: gpu.stop())
    gpu.start()

    def inputs() -> LiveInputs:
        now = time.time()
        phase = phase_of(record, now)
        runner = environment.runner
        return LiveInputs(
            scenario=scenario,
            record=record,
            now=now,
            state=str(runner.state) if runner is not None else "missing",
            workers=workers(),
            servers=server_views(scenario, server_readings(), stopped=phase == "stopped", in_warmup=phase == "warmup"),
            errors=locust_errors(environment),
            gpu=gpu.view,
        )

    tab = InferenceTab(environment, inputs)
    tab.install()
    return tab
