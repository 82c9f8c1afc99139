"""`inferload compare --fail-on` as a CI gate when a target was renamed between two real runs (Triton's
add_sub example, tests/examples/triton/add_sub): a gate with no target in both runs judges nothing,
so it is a usage error (exit 2), never a silent pass; `--rename A_NAME=B_NAME` pairs the two and
the gate judges them."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import inferload
from tests.support.example_triton import ExampleTriton
from tests.support.scenario_factory import write_scenario


def one_run(folder: Path, name: str, address: str) -> Path:
    folder.mkdir()
    target = {
        "name": name,
        "kind": "triton-grpc",
        "address": address,
        "model": "add_sub",
        "inputs": [{"name": n, "shape": [4], "dtype": "FP32", "data": "zeros"} for n in ("INPUT0", "INPUT1")],
    }
    data = {"name": "gate", "duration": "5s", "targets": [target], "shape": {"kind": "steady", "users": 1}}
    out = folder / "results"
    done = inferload("run", str(write_scenario(folder, data)), "--headless", "--out", str(out), timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_a_gate_over_a_renamed_target_exits_2_and_rename_pairs_them(example_models_triton: ExampleTriton, tmp_path: Path) -> None:
    before = one_run(tmp_path / "before", "grpc", example_models_triton.grpc)
    after = one_run(tmp_path / "after", "add-sub-grpc", example_models_triton.grpc)

    unpaired = inferload("compare", str(before), str(after), "--fail-on", "p99:+1000%")
    assert unpaired.returncode == 2, unpaired.stdout + unpaired.stderr  # was 0: an empty gate passed
    assert "A and B have no target in common (A: grpc; B: add-sub-grpc)" in unpaired.stderr
    assert "--rename A_NAME=B_NAME" in unpaired.stderr

    paired = inferload("compare", str(before), str(after), "--fail-on", "p99:+1000%", "--rename", "grpc=add-sub-grpc")
    assert paired.returncode == 0, paired.stdout + paired.stderr
    assert "target: grpc (in B: add-sub-grpc)" in paired.stdout
    assert "grpc (B: add-sub-grpc) p99:+1000%:" in paired.stdout and "pass" in paired.stdout
