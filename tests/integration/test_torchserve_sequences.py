"""TorchServe's own stateful example (tests/examples/torchserve/stateful, see its SOURCE.md: sequence
batching, a running sum per sequence id) driven with the target's ``sequence`` key, on a real
TorchServe.

TorchServe opens a sequence (a job group) for each new ``ts_request_sequence_id`` and logs it
(``added jobGroup for sequenceId:<id>``): that log is the truth of which ids reached it. With
``sequence: {length: 20}`` each user's requests carry ids of its own, a new one every 20 requests;
a static header instead puts every request of every user into one sequence, which TorchServe
serves one request at a time (the run now says so at its start).
"""

from __future__ import annotations

import importlib.util
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import TorchServeModelConfig, start_torchserve, stop_torchserve
from tests.support.locust_runner import LocustRun, run_locust
from tests.support.scenario_factory import write_scenario
from tests.support.torchserve_archive import archive_model
from tests.support.waiting import wait_until

STATEFUL_DIR = Path(__file__).resolve().parents[1] / "examples" / "torchserve" / "stateful"
READY_TIMEOUT_S = 180
# the example's model-config.yaml opens at most maxNumSequence: 4 sequences and closes one after
# 10 ms idle: with 2 users, a user's new sequence and its previous one not yet closed fit (3 users on a
# loaded machine had 5 open: TorchServe answered 503 "Please use scale workers API to add workers")
USERS = 2
LENGTH = 20
JOB_GROUP = re.compile(r"added jobGroup for sequenceId:(\S+)")


@dataclass(frozen=True)
class StatefulServer:
    address: str
    ts_log: Path

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of TorchServe's log (what it did last, for a failure's message)."""
        return "\n".join(self.ts_log.read_text(errors="replace").splitlines()[-lines:])

    def job_groups_since(self, offset: int) -> list[str]:
        """The sequence ids TorchServe opened a job group for since ``offset`` of its log, in order."""
        with self.ts_log.open("rb") as log:
            log.seek(offset)
            return JOB_GROUP.findall(log.read().decode("utf-8", "replace"))


def _net_weights(path: Path) -> None:
    """The example's Net, freshly made (its handler never runs it): the state dict BaseHandler loads."""
    import torch

    spec = importlib.util.spec_from_file_location("stateful_example_net", STATEFUL_DIR / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.Net().state_dict(), path)


def _predict(url: str) -> bytes:
    request = urllib.request.Request(url, data=b"1", headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return bytes(response.read())


@pytest.fixture(scope="module")
def stateful_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatefulServer]:
    work = tmp_path_factory.mktemp("ts-stateful")
    weights = work / "model_cnn.pt"
    _net_weights(weights)
    store = work / "store"
    archive_model(  # as the example's README archives it (its requirements.txt: the lru shim instead)
        store,
        "stateful",
        STATEFUL_DIR / "stateful_handler.py",
        model_file=STATEFUL_DIR / "model.py",
        serialized_file=weights,
        extra_files=[STATEFUL_DIR / "shims"],
        config_file=STATEFUL_DIR / "model-config.yaml",
    )
    ports = ServerPorts.free()
    record = start_torchserve(work, ports, ("stateful",), TorchServeModelConfig(batch_size=4, workers=2), store=store)
    address = f"http://127.0.0.1:{ports.ts_inference}"
    try:
        wait_until(
            lambda: _predict(f"{address}/predictions/stateful") == b"1",  # a sequence of its own: its first sum
            timeout_s=READY_TIMEOUT_S,
            what="TorchServe to serve the stateful example",
            interval_s=0.5,
            ignore=(OSError,),
        )
        yield StatefulServer(address, work / "torchserve" / "logs" / "ts_log.log")
    finally:
        stop_torchserve(record, work)
        assert processes_mentioning(str(work)) == []


def _run(folder: Path, server: StatefulServer, users: int = USERS, **keys: Any) -> tuple[LocustRun, list[str]]:
    (folder / "ones.txt").write_text("1\n")  # each request's body: "1", the running sum's step
    target = {
        "name": "stateful",
        "kind": "torchserve-rest",
        "address": server.address,
        "model": "stateful",
        "inputs": [{"name": "n", "shape": [1], "dtype": "BYTES", "data": {"dataset": "ones.txt"}}],
        "content_type": "text",
        **keys,
    }
    data = {"name": "stateful", "duration": "5s", "targets": [target], "shape": {"kind": "steady", "users": users}}
    offset = server.ts_log.stat().st_size
    run = run_locust(write_scenario(folder, data), folder)

    def settled() -> list[str] | None:  # TorchServe's log is written in the background
        groups = server.job_groups_since(offset)
        return groups if groups and groups == server.job_groups_since(offset) else None

    return run, wait_until(settled, timeout_s=10, what="TorchServe's log of the run's sequences")


def test_each_user_sends_sequences_of_its_own_ids(stateful_server: StatefulServer, tmp_path: Path) -> None:
    run, groups = _run(tmp_path, stateful_server, sequence={"length": LENGTH})

    assert run.returncode == 0, (run.output[-3000:], run.failures_csv)
    target = run.summary["targets"]["stateful"]
    # (once, on a shard beside two others, 5 requests came in 5 s where about 1,000 do: the run's and
    # TorchServe's own words are kept in the message, to tell a stalled server from a stalled client)
    stalled = f"job groups {groups}; the run's output: {run.output[-2000:]}; TorchServe's log: {stateful_server.log_tail()}"
    assert target["requests"] > 2 * LENGTH and target["failures"] == 0, (target, run.failures_csv, stalled)
    ids = set(groups)
    assert all(sequence_id.startswith("inferload-") for sequence_id in ids), sorted(ids)[:5]  # no request without one
    # a new id every LENGTH requests of a user (a job group idle for 10 ms is closed and may open again for its id)
    assert USERS <= len(ids) <= target["requests"] // LENGTH + 2 * USERS, (len(ids), target["requests"])


def test_a_static_sequence_header_is_one_sequence_and_the_run_says_so(stateful_server: StatefulServer, tmp_path: Path) -> None:
    run, groups = _run(tmp_path, stateful_server, headers={"ts_request_sequence_id": "seq_0"})

    assert run.returncode == 0, run.output
    assert set(groups) == {"seq_0"}  # every user's every request: one sequence, one request at a time
    assert "every request of every user carries the one ts_request_sequence_id 'seq_0'" in run.output
    assert "set the target's sequence: {length, concurrent}" in run.output


def test_users_as_many_as_the_models_sequences_reopen_a_refused_sequence_after_a_pause(
    stateful_server: StatefulServer, tmp_path: Path
) -> None:
    """maxNumSequence 4, 4 users, sequences of 5: TorchServe still holds an ended sequence when its user
    opens the next, and refuses that (503). Each refusal opened yet another id at once (537 of 845
    requests failed, 18,509 failures in 8 s at 8 users); now the user backs off and opens the same id again."""
    length, users = 5, 4
    run, groups = _run(tmp_path, stateful_server, users=users, sequence={"length": length})
    target = run.summary["targets"]["stateful"]
    served = target["requests"] - target["failures"]
    assert served > users * length, (target, run.failures_csv)
    # one id per sequence served (and the ones open at the end): refusals opened no new ids
    assert len(set(groups)) <= served // length + 2 * users, (len(set(groups)), target)
    # each refusal says why, past the first 120 characters of TorchServe's reason
    assert all("If this is a sequence inference" in row["Error"] for row in run.failures_csv), run.failures_csv
