"""A Triton sequence (stateful) model driven over gRPC and HTTP, against a real Triton serving the
vendored ``sequence_py`` model (tests/examples/triton/sequence_py, see its SOURCE.md).

The model keeps a list per correlation ID: a START request opens it with the answer 1, every
later request of the ID appends and answers the next number, and it refuses a START for an ID it
knows or a request without START for one it does not (so IDs reused across users, or a lost START,
fail requests). On unload it prints every list it kept, that is every answer it gave, in order.
Served under two names (one per protocol), one headless run with 2 users per target: 0 failures,
and the model's own record shows the state was kept: each sequence's answers are 1, 2, ... up to
the sequence length (gRPC: the scenario's ``sequence`` key with 2 sequences open per user; HTTP: no
key, so the defaults the run announces), only the sequences open when the run stopped are
shorter, and the answers add up to the requests sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferload.scenario.targets import DEFAULT_SEQUENCE_LENGTH
from tests.support.example_triton import ExampleTriton
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import write_scenario

USERS_PER_TARGET = 2
GRPC_LENGTH, GRPC_CONCURRENT = 4, 2


def _target(name: str, kind: str, address: str, model: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "address": address,
        "model": model,
        "inputs": [{"name": "INPUT0", "shape": [1], "dtype": "INT32", "data": {"generator": "constant", "value": 1}}],
        # sequence_py answers [1] for a batch of one, without the batch dimension its metadata gives
        # ([-1, 1]): the default shape check would count that model quirk as a failure
        "response_check": "none",
        "timeout": "10s",
        **extra,
    }


def _check_sequences(answers: dict[int, list[int]], length: int, open_at_stop: int, requests: int, name: str) -> None:
    assert answers, f"{name}: the model kept no sequence"
    for correlation_id, kept in answers.items():
        assert isinstance(correlation_id, int) and 0 < correlation_id < 2**63, correlation_id
        assert kept == list(range(1, len(kept) + 1)), f"{name}: answers of sequence {correlation_id}: {kept}"
        assert len(kept) <= length, f"{name}: sequence {correlation_id} went past its END: {kept}"
    complete = [kept for kept in answers.values() if len(kept) == length]
    partial = [kept for kept in answers.values() if len(kept) < length]
    assert len(complete) >= 2, f"{name}: {len(complete)} complete sequences"
    # only the sequences open when the users stopped end early: none was abandoned or lost its ID
    assert len(partial) <= open_at_stop, f"{name}: {len(partial)} unfinished sequences (at most {open_at_stop} were open)"
    answered = sum(len(kept) for kept in answers.values())
    # a call in flight when its user stopped reached the model but was never counted (one per user at most)
    assert requests <= answered <= requests + USERS_PER_TARGET, (name, requests, answered)


def test_a_sequence_model_keeps_its_state_over_grpc_and_http(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    targets = [
        _target(
            "grpc",
            "triton-grpc",
            example_models_triton.grpc,
            "seq_grpc",
            sequence={"length": GRPC_LENGTH, "concurrent": GRPC_CONCURRENT},
        ),
        _target("http", "triton-http", example_models_triton.http, "seq_http"),  # no key: the model's config says it is one
    ]
    data = {
        "name": "triton-sequences",
        "duration": "4s",
        "targets": targets,
        "shape": {"kind": "steady", "users": 2 * USERS_PER_TARGET},
    }
    run = run_locust(write_scenario(tmp_path, data), tmp_path)
    assert run.returncode == 0, run.output
    assert "target 'http': model 'seq_http' is a sequence model" in run.output
    assert f"sequences of {DEFAULT_SEQUENCE_LENGTH} requests, 1 open at a time" in run.output
    assert "target 'grpc': model 'seq_grpc' is a sequence model" not in run.output  # its key says how

    summary = run.summary["targets"]
    rows = {row["name"]: row for row in run.stats_json if row["name"] in ("grpc", "http")}
    for name in ("grpc", "http"):
        assert summary[name]["failures"] == 0 and rows[name]["num_failures"] == 0, run.output
        assert summary[name]["requests"] == rows[name]["num_requests"] > 0

    grpc_answers = example_models_triton.sequences_kept("seq_grpc")
    http_answers = example_models_triton.sequences_kept("seq_http")
    _check_sequences(grpc_answers, GRPC_LENGTH, USERS_PER_TARGET * GRPC_CONCURRENT, summary["grpc"]["requests"], "grpc")
    _check_sequences(http_answers, DEFAULT_SEQUENCE_LENGTH, USERS_PER_TARGET, summary["http"]["requests"], "http")
    assert not set(grpc_answers) & set(http_answers)  # every user drew its own IDs
