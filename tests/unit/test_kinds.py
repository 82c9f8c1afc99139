"""The target kinds' one table (inferload/scenario/kinds.py) agrees with the user classes: each
record names the most general public user class that speaks its kind, and that class is exported."""

from __future__ import annotations

from typing import get_args

import inferload
from inferload.scenario.kinds import SERVER_KINDS, TARGET_KINDS, TargetKind
from inferload.users.base import InferenceUser
from inferload.users.classes import USER_CLASS_BY_KIND


def most_general_speaker(kind: str) -> type[InferenceUser]:
    """Up the scenario class's bases while each still declares the kind among its own."""
    found = USER_CLASS_BY_KIND[kind]
    for base in found.__mro__[1:]:
        if base is InferenceUser or not issubclass(base, InferenceUser):
            break
        if "target_kinds" not in base.__dict__:
            continue
        if kind not in base.target_kinds:
            break
        found = base
    return found


def test_every_kind_has_one_record_and_a_user_class() -> None:
    assert TARGET_KINDS == get_args(TargetKind) == tuple(SERVER_KINDS)
    assert set(USER_CLASS_BY_KIND) == set(TARGET_KINDS)


def test_each_record_names_the_public_class_that_speaks_its_kind() -> None:
    for kind, record in SERVER_KINDS.items():
        assert record.user_class == most_general_speaker(kind).__name__, kind
        assert record.user_class in inferload.__all__, kind
        assert kind in getattr(inferload, record.user_class).target_kinds, kind


def test_a_class_given_another_kind_names_the_kind_s_own_class() -> None:
    from inferload import TritonHttpUser

    try:
        type("WrongUser", (TritonHttpUser,), {"abstract": True, "target": {"name": "t", "kind": "bentoml-http", "model": "m"}})
    except TypeError as error:
        assert "inferload.BentoMLHttpUser" in str(error)
    else:
        raise AssertionError("a triton-http class took a bentoml-http target")


def test_every_server_has_its_start_check_counters_reader_metrics_page_collector_source_and_launcher() -> None:
    from inferload.local.servers.manager import LOCAL_SERVERS
    from inferload.observe.collector import SOURCE_CONFIGS
    from inferload.run.start_checks import START_CHECKS
    from inferload.scenario.kinds import Server
    from inferload.servermetrics.readers import COUNTER_READERS, METRICS_PAGES

    servers = set(get_args(Server))
    assert {record.server for record in SERVER_KINDS.values()} == servers
    assert set(START_CHECKS) == servers and set(COUNTER_READERS) == servers
    assert set(METRICS_PAGES) == servers and set(SOURCE_CONFIGS) == servers
    assert set(LOCAL_SERVERS) == servers and all(name == server.name for name, server in LOCAL_SERVERS.items())
