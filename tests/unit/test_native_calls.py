"""Native-thread calls (`inferload.users.native_calls`): greenlets get what a blocking call gives
(its value, or its exception), the calls run off the hub's thread, and their completions reach the
hub through one watcher. No server: the "call" is a plain function run on the caller's thread."""

from __future__ import annotations

import gevent
import pytest
from gevent import monkey

from inferload.users.native_calls import CALLS_ENV, Completions, NativeCaller, calls_mode

native_ident = monkey.get_original("_thread", "get_ident")
native_lock = monkey.get_original("_thread", "allocate_lock")


def echo(request: object, **kwargs: object) -> tuple[object, dict[str, object], int]:
    return request, kwargs, native_ident()


def test_every_greenlet_gets_its_own_answer_from_another_thread() -> None:
    completions = Completions()
    callers = [NativeCaller(echo, completions) for _ in range(8)]
    answers: dict[int, list[tuple[object, dict[str, object], int]]] = {}

    def user(index: int) -> None:
        answers[index] = [callers[index](f"{index}-{n}", timeout=5.0, metadata=None) for n in range(25)]

    gevent.joinall([gevent.spawn(user, i) for i in range(8)], raise_error=True)
    main = native_ident()
    for index, got in answers.items():
        assert [request for request, _, _ in got] == [f"{index}-{n}" for n in range(25)]
        assert all(kwargs == {"timeout": 5.0, "metadata": None} for _, kwargs, _ in got)
        assert all(thread != main for _, _, thread in got)
        assert len({thread for _, _, thread in got}) == 1  # one user, one thread
    assert completions.delivered == 200
    assert 1 <= completions.batches <= 200
    assert all(caller.close(1.0) for caller in callers)
    assert completions.users == 0


def test_the_exception_raised_by_the_call_is_raised_in_the_greenlet() -> None:
    class Refused(Exception):
        pass

    def refuse(request: object, **_: object) -> None:
        raise Refused(f"no for {request}")

    caller = NativeCaller(refuse, Completions())
    with pytest.raises(Refused, match="no for ping"):
        gevent.spawn(caller, "ping").get()
    assert caller.close(1.0)
    with pytest.raises(RuntimeError, match="after close"):
        caller("late")


def test_a_user_killed_mid_call_leaves_the_thread_to_finish_and_stop() -> None:
    gate = native_lock()
    gate.acquire()

    def slow(request: object, **_: object) -> object:
        gate.acquire()  # blocks the native thread until released below
        return request

    completions = Completions()
    caller = NativeCaller(slow, completions)
    greenlet = gevent.spawn(caller, "in flight")
    gevent.sleep(0.01)
    greenlet.kill()  # as Locust stops a user
    assert greenlet.dead
    gate.release()
    assert caller.close(1.0)  # the in-flight call's answer was dropped, then the stop job answered
    assert completions.users == 0


def test_calls_mode_reads_the_environment() -> None:
    assert calls_mode({}) == "gevent"
    assert calls_mode({CALLS_ENV: "gevent"}) == "gevent"
    assert calls_mode({CALLS_ENV: " Native "}) == "native"
    with pytest.raises(ValueError, match=f"{CALLS_ENV}='threads': expected one of gevent, native"):
        calls_mode({CALLS_ENV: "threads"})
