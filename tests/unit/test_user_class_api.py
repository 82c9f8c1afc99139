"""The user classes of the Python API, without a server: what is checked when a class is made
(its target's kind, a target written as a mapping, a target without an address taking the host),
the default-task rule, and ``self.client.infer`` on a protocol of the test's own (a fake, named
so: it shows the client's reporting, not a server's behaviour)."""

from __future__ import annotations

import time
from argparse import Namespace
from pathlib import Path
from typing import Any, ClassVar

import gevent
import numpy as np
import pytest
from locust import User, task
from locust.env import Environment
from locust.exception import StopTest

import inferload
from inferload.errors import ConnectionRefused, ScenarioError
from inferload.scenario.kinds import GENERATIVE_KINDS, TARGET_KINDS
from inferload.scenario.targets import Target
from inferload.traffic.arrivals import Arrival
from inferload.users.base import ArrivalQueue, InferenceUser, InferResult, inference_task
from inferload.users.classes import user_class_for
from inferload.users.request_pool import RequestData

HERE = str(Path(__file__))
INPUTS = [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}]

#: every public user class and the kinds it speaks
SPEAKS = {
    inferload.TritonGrpcUser: ("triton-grpc",),
    inferload.TritonStreamUser: ("triton-grpc",),
    inferload.TritonHttpUser: ("triton-http",),
    inferload.TorchServeRestUser: ("torchserve-rest",),
    inferload.KServeV2HttpUser: ("kserve-v2-http",),
    inferload.KServeV2GrpcUser: ("kserve-v2-grpc",),
    inferload.KServeV1HttpUser: ("kserve-v1-http",),
    inferload.BentoMLHttpUser: ("bentoml-http",),
    inferload.OpenAIUser: ("openai-chat", "openai-completions"),
    inferload.TritonGenerateUser: ("triton-generate",),
}


def tiny(kind: str = "triton-grpc", address: str = "127.0.0.1:8001", name: str = "tiny") -> Target:
    keys = {"name": name, "kind": kind, "address": address, "model": "tiny"}
    return Target.model_validate(keys if kind in GENERATIVE_KINDS else {**keys, "inputs": INPUTS})


# -- every kind's class, exported, and the kind it speaks -------------------------------------------


def test_every_kind_has_an_exported_class_that_speaks_it() -> None:
    assert set(SPEAKS) <= {getattr(inferload, name) for name in inferload.__all__}
    for cls, kinds in SPEAKS.items():
        assert cls.target_kinds == kinds, cls.__name__
        assert cls.abstract is True
    for kind in TARGET_KINDS:  # the class a scenario's target of each kind gets speaks that kind
        assert user_class_for(tiny(kind, "127.0.0.1:8001"), Path(".")).target.kind == kind


@pytest.mark.parametrize(
    ("base", "kind", "expected", "suggested"),
    [
        (inferload.TritonGrpcUser, "triton-http", "'triton-grpc'", "TritonHttpUser"),
        (inferload.KServeV2GrpcUser, "triton-grpc", "'kserve-v2-grpc'", "TritonGrpcUser"),  # its base speaks it, it does not
        (inferload.TorchServeRestUser, "kserve-v2-http", "'torchserve-rest'", "KServeV2HttpUser"),
    ],
)
def test_a_target_of_a_kind_the_class_does_not_speak_is_a_type_error_at_class_creation(
    base: type[InferenceUser], kind: str, expected: str, suggested: str
) -> None:
    with pytest.raises(TypeError) as caught:
        type("Wrong", (base,), {"target": tiny(kind), "__module__": __name__})
    message = str(caught.value)
    assert message.startswith(f"{HERE}: Wrong.target.kind: Wrong is a {base.__name__}, which speaks {expected}; ")
    assert f"got {kind!r}" in message and f"inferload.{suggested}" in message


def test_a_target_can_be_a_mapping_of_target_keys_and_the_class_gives_its_kind() -> None:
    class Tiny(inferload.TritonHttpUser):
        target = {"name": "tiny", "address": "http://127.0.0.1:8000", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012

    assert isinstance(Tiny.target, Target)
    assert (Tiny.target.kind, Tiny.target.address, Tiny.target.inputs[0].shape) == ("triton-http", "127.0.0.1:8000", (16,))


def test_a_class_that_declares_expected_outputs_has_them_in_its_fit_and_its_base_keeps_none() -> None:
    class Checked(inferload.TritonHttpUser):
        target = {"name": "tiny", "address": "http://127.0.0.1:8000", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012
        expected_outputs = {"OUTPUT__0": [1, 4]}  # noqa: RUF012

    assert Checked.fit.expected_outputs == {"OUTPUT__0": (1, 4)} and Checked.fit.model_batches
    assert inferload.TritonHttpUser.fit.expected_outputs == {}


def test_a_bad_target_mapping_names_the_file_the_key_path_and_what_was_expected() -> None:
    with pytest.raises(ScenarioError) as caught:

        class Tiny(inferload.TritonGrpcUser):
            target = {"name": "tiny", "adress": "127.0.0.1:8001", "model": "tiny", "inputs": [{**INPUTS[0], "dtype": "F32"}]}  # type: ignore[assignment]  # noqa: RUF012

    lines = str(caught.value).splitlines()
    assert f"{HERE}: Tiny.target.adress: unknown key 'adress' (did you mean 'address'?)" in lines
    assert any(
        line.startswith(f"{HERE}: Tiny.target.inputs[0].dtype: expected one of FP32, ") and "got 'F32'" in line for line in lines
    )


def test_a_mapping_needs_a_kind_where_the_class_speaks_several_and_a_target_must_be_a_target() -> None:
    with pytest.raises(ScenarioError, match=r"Custom\.target\.kind: required key is missing"):
        type("Custom", (InferenceUser,), {"target": {"name": "t", "address": "127.0.0.1:1", "model": "m", "inputs": INPUTS}})
    with pytest.raises(TypeError, match=r"Bad\.target: expected an inferload\.Target or a mapping of target keys; got str"):
        type("Bad", (inferload.TritonGrpcUser,), {"target": "127.0.0.1:8001"})


# -- host -----------------------------------------------------------------------------------------------


def test_a_target_without_an_address_takes_the_users_host_when_a_user_is_made() -> None:
    class Tiny(inferload.TritonGrpcUser):
        target = {"name": "tiny", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012

    assert not hasattr(Tiny, "target")  # no address and no host yet: no Target
    Tiny.host = "127.0.0.1:9001"  # the class attribute, or --host: Locust puts --host on every user class at start
    Tiny(Environment(user_classes=[Tiny]))
    assert Tiny.target.address == "127.0.0.1:9001"  # type: ignore[attr-defined]
    Tiny.host = "127.0.0.1:9002"  # a new host (the web UI can change it between runs): a new target
    Tiny(Environment(user_classes=[Tiny]))
    assert Tiny.target.address == "127.0.0.1:9002"  # type: ignore[attr-defined]

    class Pinned(Tiny):  # a subclass with an address of its own keeps it
        target = tiny(address="127.0.0.1:9003")  # type: ignore[assignment]

    Pinned(Environment(user_classes=[Pinned]))
    assert Pinned.target.address == "127.0.0.1:9003"


def test_no_host_stops_the_test_at_the_first_user_with_exit_code_2_and_says_what_to_set() -> None:
    class Tiny(inferload.TritonHttpUser):
        target = {"name": "tiny", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012

    environment = Environment(user_classes=[Tiny], parsed_options=Namespace(headless=True))
    with pytest.raises(StopTest) as caught:
        Tiny(environment)
    assert str(caught.value) == (
        f"inferload: {HERE}: Tiny.target has no address: give the target an address, "
        "set host on Tiny (host = 'http://127.0.0.1:8000'), or run Locust with --host"
    )
    assert environment.process_exit_code == 2
    runner = environment.create_local_runner()  # a real runner: the spawning stops, the test with it
    runner.start(1, spawn_rate=10)
    deadline = time.monotonic() + 5
    while runner.state != "stopped" and time.monotonic() < deadline:
        gevent.sleep(0.05)
    assert runner.state == "stopped" and runner.user_count == 0


def test_a_host_the_kind_cannot_use_is_named_as_the_host() -> None:
    class Tiny(inferload.TritonGrpcUser):
        target = {"name": "tiny", "model": "tiny", "inputs": INPUTS}  # type: ignore[assignment]  # noqa: RUF012

    with pytest.raises(
        TypeError, match=r"Tiny\.target \(address: the host 'http://127\.0\.0\.1:8001'\)\.address: expected host:port"
    ):
        Tiny.target_for_host("http://127.0.0.1:8001")


# -- the default task -------------------------------------------------------------------------------


def test_a_class_without_tasks_of_its_own_runs_the_default_task() -> None:
    assert inferload.inference_task is inference_task
    classes: list[type[InferenceUser]] = [*SPEAKS, InferenceUser, user_class_for(tiny(), Path("."))]
    for cls in classes:
        assert cls.tasks == [inference_task], cls.__name__

    class Tiny(inferload.TritonGrpcUser):
        target = tiny()

    assert Tiny.tasks == [inference_task]


def test_tasks_of_its_own_replace_the_default_task_and_are_inherited_as_locust_inherits() -> None:
    class Own(inferload.TritonGrpcUser):
        target = tiny()

        @task(2)
        def first(self) -> None:
            self.client.infer(request_index=0)

    assert Own.tasks == [Own.first, Own.first]

    class Listed(inferload.TritonGrpcUser):
        target = tiny()
        tasks = [Own.first]  # noqa: RUF012

    assert Listed.tasks == [Own.first]

    class Child(Own):  # no tasks of its own: its base's (Locust's rule), still without the default
        pass

    assert Child.tasks == Own.tasks

    class More(Own):  # its own tasks join its base's own ones (Locust's rule)
        @task
        def second(self) -> None:
            pass

    assert More.tasks == [Own.first, Own.first, More.second]


def test_a_task_may_not_take_the_name_of_a_method_the_users_calls_need() -> None:
    with pytest.raises(TypeError) as caught:

        class Tiny(inferload.TritonHttpUser):
            target = tiny("triton-http")

            @task
            def next_request(self) -> None:  # type: ignore[override]  # what the check is for
                self.client.infer()

    assert str(caught.value) == (
        f"{HERE}: Tiny.next_request: a task of this name would replace InferenceUser.next_request, "
        "which the user's calls need; give the task another name"
    )


def test_the_default_task_can_be_kept_next_to_tasks_of_its_own_with_a_weight() -> None:
    def readiness(user: User) -> None:
        pass

    class Mixed(inferload.TritonGrpcUser):
        target = tiny()
        tasks = {inference_task: 3, readiness: 1}  # type: ignore[assignment]  # noqa: RUF012

    assert Mixed.tasks == [inference_task, inference_task, inference_task, readiness]


# -- self.client.infer --------------------------------------------------------------------------------


class CountingUser(InferenceUser):
    """A protocol of the test's own: each request is its index as bytes, answered by its length; the
    calls listed in ``refuse`` raise a refused connection."""

    abstract = True
    request_type = "fake"
    refuse: ClassVar[set[int]] = set()
    sent: ClassVar[list[int]] = []

    @classmethod
    def encode_request(cls, data: RequestData) -> bytes:
        return b"x" * (data.index + 1)

    def connect(self) -> None:
        self.request_pool()

    def send(self) -> int:
        index, request = self.next_request()
        self.sent.append(index)
        if len(self.sent) in self.refuse:
            raise ConnectionRefusedError(111, "refused")
        return len(request)

    def close(self) -> None:
        pass


def counting_user(folder: Path, samples: int = 3) -> tuple[CountingUser, list[dict[str, Any]]]:
    """A started user of a target with ``samples`` distinct requests (a data set of that many), and the request events it fires."""
    np.save(folder / "samples.npy", np.zeros((samples, 2), dtype=np.float32))
    data = {"dataset": str(folder / "samples.npy")}
    target = Target.model_validate(
        {
            "name": "counted",
            "kind": "triton-grpc",
            "address": "127.0.0.1:1",
            "model": "m",
            "inputs": [{"name": "I", "shape": [2], "dtype": "FP32", "data": data}],
        }
    )
    cls = type("Counted", (CountingUser,), {"target": target, "sent": [], "refuse": set()})
    environment = Environment(user_classes=[cls])
    events: list[dict[str, Any]] = []
    environment.events.request.add_listener(lambda **event: events.append(event))
    user = cls(environment)
    assert isinstance(user, CountingUser)
    user.on_start()
    return user, events


def test_client_infer_sends_times_and_reports_a_call_as_the_default_task_does(tmp_path: Path) -> None:
    user, events = counting_user(tmp_path)
    result = user.client.infer()
    inference_task(user)
    assert isinstance(result, InferResult) and result.ok and result.error is None
    assert result.response_length == result.request_index + 1 and result.latency_ms >= 0  # type: ignore[operator]
    by_client, by_task = events
    for event in (by_client, by_task):
        assert event["request_type"] == "fake" and event["name"] == "counted"
        assert event["context"] == {"target": "counted"} and event["exception"] is None
    assert by_client["response_time"] == result.latency_ms


def test_client_infer_sends_the_request_index_given_and_checks_it(tmp_path: Path) -> None:
    user, events = counting_user(tmp_path)
    count = user.client.request_count
    assert count == 3
    results = [user.client.infer(request_index=count - 1) for _ in range(2)]
    assert [r.request_index for r in results] == [count - 1, count - 1]
    assert type(user).sent == [count - 1, count - 1]
    with pytest.raises(ValueError, match=rf"request_index {count}: target 'counted' has {count} distinct request"):
        user.client.infer(request_index=count)
    with pytest.raises(TypeError, match="request_index: expected an int; got str"):
        user.client.infer(request_index="0")  # type: ignore[arg-type]
    assert len(events) == 2  # a bad index sends nothing


def test_a_failed_call_is_returned_and_reported_never_raised(tmp_path: Path) -> None:
    user, events = counting_user(tmp_path)
    type(user).refuse = {1}
    result = user.client.infer()
    assert not result.ok and isinstance(result.error, ConnectionRefused)
    assert result.response_length == 0 and str(result.error) == "refused: cannot connect to 127.0.0.1:1"
    assert events[0]["exception"] is result.error
    inference_task(user)  # the default task backs off after a refusal; the client alone does not
    assert user.refused_backoff.delay_s == 0.0  # the second call was answered


def test_an_open_loop_sender_sends_the_sample_its_arrival_names(tmp_path: Path) -> None:
    """A replay file's `sample` column: the request that starts from that sample; no sample, the rotation's next."""
    user, events = counting_user(tmp_path)
    queue = ArrivalQueue(max_queue=10)
    user.wiring.arrivals = queue  # as an open-loop run wires it
    now = time.time()
    queue.offer(now, Arrival(0.0, "counted", sample=2))
    queue.offer(now, Arrival(0.0, "counted"))
    inference_task(user)
    inference_task(user)
    named, rotation = type(user).sent
    assert named == 2 and rotation in range(3)
    assert all("send_lag_ms" in event["context"] for event in events)  # sent as open-loop arrivals
