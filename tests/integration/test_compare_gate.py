"""`inferload compare --fail-on` as a CI gate when a target was renamed between two real runs: a gate
with no target in both runs judges nothing, so it is a usage error (exit 2), never a silent pass;
`--rename A_NAME=B_NAME` pairs the two and the gate judges them.

What is tested is compare's pairing, not the server: both runs go to the reference server
(docs/reference-server.md), each call held 5 ms, so both runs' p99 is one hold and the gate's
+1000 % passes by a wide margin."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import inferload
from tests.support.reference_server import reference_server, reference_target
from tests.support.scenario_factory import write_scenario

HOLD_MS = 5.0


def one_run(folder: Path, name: str, address: str) -> Path:
    folder.mkdir()
    target = reference_target(name, "triton-grpc", address)
    data = {"name": "gate", "duration": "3s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    out = folder / "results"
    done = inferload("run", str(write_scenario(folder, data)), "--headless", "--out", str(out), timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_a_gate_over_a_renamed_target_exits_2_and_rename_pairs_them(tmp_path: Path) -> None:
    with reference_server(delay={"law": "fixed", "ms": HOLD_MS}) as server:
        before = one_run(tmp_path / "before", "grpc", server.grpc_address)
        after = one_run(tmp_path / "after", "add-sub-grpc", server.grpc_address)

    unpaired = inferload("compare", str(before), str(after), "--fail-on", "p99:+1000%")
    assert unpaired.returncode == 2, unpaired.stdout + unpaired.stderr  # was 0: an empty gate passed
    assert "A and B have no target in common (A: grpc; B: add-sub-grpc)" in unpaired.stderr
    assert "--rename A_NAME=B_NAME" in unpaired.stderr

    paired = inferload("compare", str(before), str(after), "--fail-on", "p99:+1000%", "--rename", "grpc=add-sub-grpc")
    assert paired.returncode == 0, paired.stdout + paired.stderr
    assert "target: grpc (in B: add-sub-grpc)" in paired.stdout
    assert "grpc (B: add-sub-grpc) p99:+1000%:" in paired.stdout and "pass" in paired.stdout
