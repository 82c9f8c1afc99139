"""The servers' and kinds' one table (inferload/scenario/kinds.py): every kind has one record and a
user class; every server has one record, and each role it names (start check, metrics page,
counters, collector source, local launcher) is there and is what that role's callers take; each
kind's record names the most general public user class that speaks it, and that class is exported."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

import inferload
from inferload.local.servers.manager import LocalServer, local_server
from inferload.scenario.generation import GenerationSpec
from inferload.scenario.kinds import (
    GENERATIVE_KINDS,
    SERVER_KINDS,
    SERVER_RECORDS,
    TARGET_KINDS,
    Server,
    ServerRole,
    TargetKind,
    has_role,
    implementation,
)
from inferload.scenario.targets import TARGET_CLASSES, Target
from inferload.users.base import InferenceUser
from inferload.users.classes import user_class_for

INPUTS = [{"name": "INPUT__0", "shape": [16], "dtype": "FP32"}]


def target_of(kind: str) -> Target:
    """A target of the kind (a generative kind's prompt is its default)."""
    keys = {"name": "t", "kind": kind, "address": "127.0.0.1:1", "model": "m"}
    return Target.model_validate(keys if kind in GENERATIVE_KINDS else {**keys, "inputs": INPUTS})


def most_general_speaker(kind: str) -> type[InferenceUser]:
    """Up the scenario class's bases while each still declares the kind among its own."""
    found: type[InferenceUser] = getattr(inferload, SERVER_KINDS[kind].scenario_class_name)
    for base in found.__mro__[1:]:
        if base is InferenceUser or not issubclass(base, InferenceUser):
            break
        if "target_kinds" not in base.__dict__:
            continue
        if kind not in base.target_kinds:
            break
        found = base
    return found


def test_every_kind_has_one_record_and_a_scenario_user_class_that_speaks_it() -> None:
    assert TARGET_KINDS == get_args(TargetKind) == tuple(SERVER_KINDS)
    for kind in TARGET_KINDS:
        made = user_class_for(target_of(kind), Path("."))
        assert made.__mro__[1].__name__ == SERVER_KINDS[kind].scenario_class_name, kind
        assert kind in made.target_kinds, kind


def test_every_server_has_one_record_whose_roles_are_each_implemented() -> None:
    assert tuple(SERVER_RECORDS) == get_args(Server)
    assert {record.server for record in SERVER_KINDS.values()} == set(get_args(Server))
    parameters: dict[str, int] = {"start_check": 2, "metrics_page": 1, "counters": 7, "source_config": 2}
    for server, record in SERVER_RECORDS.items():
        assert record.server == server
        assert has_role(server, "start_check") and has_role(server, "metrics_page"), server  # every server has these
        # a server that reads counters has a collector source for the same page, and the other way round
        assert has_role(server, "counters") == has_role(server, "source_config"), server
        for role in get_args(ServerRole):
            if not has_role(server, role):
                continue
            found = implementation(server, role)
            if role == "local":  # known by its own name (the server's unless the record names another)
                name = record.local_name or server
                assert isinstance(found, LocalServer) and found.name == name and local_server(name) is found
            else:
                assert len(inspect.signature(found).parameters) == parameters[role], (server, role)


def test_a_source_config_is_the_collector_s_config_of_its_own_server() -> None:
    for server in SERVER_RECORDS:
        if not has_role(server, "source_config"):
            continue
        kind = next(kind for kind, record in SERVER_KINDS.items() if record.server == server)
        target = target_of(kind)
        config = implementation(server, "source_config")(target, "http://127.0.0.1:2/metrics")
        assert (config.kind, config.target, config.model, config.metrics_url) == (server, "t", "m", "http://127.0.0.1:2/metrics")


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


def test_the_collector_and_inferload_servers_reach_every_server_without_importing_locust() -> None:
    code = (
        "import sys; from inferload.scenario.kinds import SERVER_RECORDS, has_role, implementation; "
        "[implementation(s, r) for s in SERVER_RECORDS for r in ('metrics_page', 'counters', 'source_config', 'local')"
        " if has_role(s, r)]; "
        "print(sorted(name for name in ('locust', 'gevent') if name in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_every_kind_has_one_target_class_and_target_makes_it() -> None:
    """A kind's target is its class's (pydantic picks it by ``kind``), whether made from a mapping or by ``Target(...)``."""
    assert set(TARGET_CLASSES) == set(TARGET_KINDS)
    for kind, model in TARGET_CLASSES.items():
        assert type(target_of(kind)) is model and issubclass(model, Target)
        keys = target_of(kind).model_dump(exclude_unset=True)
        assert type(Target(**keys)) is model
    with pytest.raises(ValidationError, match="triton-grpc"):  # not a kind: the error names the kinds there are
        Target(**dict[str, Any](name="t", kind="triton-rest", address="127.0.0.1:1", model="m"))


def test_a_key_of_another_kind_is_refused_naming_the_kinds_that_take_it() -> None:
    """The keys only some kinds take are their classes' fields: nothing else lists them."""
    own = {key for model in TARGET_CLASSES.values() for key in model.model_fields} - set(Target.model_fields)
    assert own == {
        "sequence",
        "trace",
        "content_type",
        "body_template",
        "media_type",
        "management_url",
        "token_file",
        "generation",
    }
    for key in sorted(own):
        takers = [kind for kind, model in TARGET_CLASSES.items() if key in model.model_fields]
        for kind in set(TARGET_KINDS) - set(takers):
            keys = {**target_of(kind).model_dump(exclude_unset=True), key: {}}
            with pytest.raises(ValidationError) as refused:
                Target.model_validate(keys)
            (error,) = refused.value.errors()
            assert list(error["ctx"]["checks"]) == [
                (
                    (key,),
                    f"only applies to {', '.join(takers[:-1]) + ' and ' if takers[:-1] else ''}{takers[-1]} targets; this target is {kind}",
                )
            ]


def test_a_kind_key_left_empty_takes_its_default() -> None:
    """``content_type:`` or ``generation:`` written with no value (YAML's null) is the key's default."""
    torchserve = Target.model_validate({**target_of("torchserve-rest").model_dump(exclude_unset=True), "content_type": None})
    bentoml = Target.model_validate({**target_of("bentoml-http").model_dump(exclude_unset=True), "content_type": None})
    chat = Target.model_validate({**target_of("openai-chat").model_dump(exclude_unset=True), "generation": None})
    assert (torchserve.content_type, bentoml.content_type) == ("octet-stream", "json")
    assert chat.generation == GenerationSpec()
