"""The one shape every inferload user class has.

A user class is made per scenario target (`user_class_for(target)`); each simulated user builds
its client and encodes its payload once in `on_start`, then its task sends one inference call,
times it and reports it through Locust's request event. Protocol modules implement three
methods: `connect()`, `send() -> response bytes`, `close()`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from locust import User, constant, task

from inferload.payload import make_input_array
from inferload.request_errors import classify_exception
from inferload.scenario import InputSpec, Target


class InferenceUser(User):
    """Abstract base: one scenario target, one protocol client per simulated user."""

    abstract = True
    wait_time = constant(0)

    #: the scenario target this class sends to (set on the generated subclass)
    target: ClassVar[Target]
    #: label in Locust's "Type" column
    request_type: ClassVar[str] = "infer"
    #: expected output shapes including the batch dimension, from the model's metadata
    #: when it could be read (name -> shape; -1 matches any size); empty: batch check only
    expected_outputs: ClassVar[dict[str, tuple[int, ...]]] = {}
    #: False for a Triton model with max_batch_size 0: the scenario's shape is then the model's
    #: full shape and the tensor is sent without a batch dimension
    model_batches: ClassVar[bool] = True
    #: folder that relative payload paths (.npy files) are resolved against
    scenario_dir: ClassVar[Path] = Path(".")

    def on_start(self) -> None:
        self.connect()

    def on_stop(self) -> None:
        self.close()

    @task
    def infer(self) -> None:
        started = time.perf_counter()
        exception: BaseException | None = None
        response_length = 0
        try:
            response_length = self.send()
        except Exception as exc:  # every client failure becomes a classified Locust failure
            exception = classify_exception(exc, self.target.address)
        self.environment.events.request.fire(
            request_type=self.request_type,
            name=self.target.name,
            response_time=(time.perf_counter() - started) * 1000.0,
            response_length=response_length,
            exception=exception,
            context={"target": self.target.name},
        )

    def input_arrays(self) -> list[tuple[InputSpec, np.ndarray]]:
        """The payload of every input, batch dimension included (made once per user)."""
        arrays = [
            (spec, make_input_array(spec, self.target.batch_size, self.scenario_dir))
            for spec in self.target.inputs
        ]
        return arrays if self.model_batches else [(spec, array[0]) for spec, array in arrays]

    # -- protocol hooks -------------------------------------------------------------------
    def connect(self) -> None:
        raise NotImplementedError

    def send(self) -> int:
        """Send one inference call; return the response size in bytes; raise on failure."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def expected_output_shapes(target: Target, metadata: dict[str, Any] | None, max_batch_size: int) -> dict[str, tuple[int, ...]]:
    """Output shapes a response must have, from Triton model metadata (batch dim filled in)."""
    if not metadata:
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    wanted = set(target.outputs) or {o["name"] for o in metadata.get("outputs", [])}
    for output in metadata.get("outputs", []):
        if output["name"] not in wanted:
            continue
        dims = tuple(int(d) for d in output.get("shape", []))
        if max_batch_size > 0 and dims and dims[0] == -1:
            dims = (target.batch_size,) + dims[1:]
        shapes[output["name"]] = dims
    return shapes
