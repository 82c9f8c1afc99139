"""The sample models' specs: names, tensor names and shapes (no torch import, cheap to read).

Tensor names follow the libtorch convention (``INPUT__0`` / ``OUTPUT__0``) so the same names
work on Triton's Python backend, on a ``pytorch_libtorch`` Triton and in the TorchServe handler.
"""

from __future__ import annotations

from dataclasses import dataclass

INPUT_NAME = "INPUT__0"
OUTPUT_NAME = "OUTPUT__0"


@dataclass(frozen=True)
class ModelSpec:
    """What a client needs to know about a sample model (shapes exclude the batch dimension)."""

    name: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    max_batch_size: int
    description: str
    input_name: str = INPUT_NAME
    output_name: str = OUTPUT_NAME
    dtype: str = "FP32"

    @property
    def item_bytes(self) -> int:
        """Bytes of one FP32 input item (the unit of a raw octet-stream request)."""
        n = 1
        for d in self.input_shape:
            n *= d
        return 4 * n


SPECS: dict[str, ModelSpec] = {
    "tiny": ModelSpec("tiny", (16,), (4,), 32, "MLP 16 -> 32 -> 4"),
    "cnn": ModelSpec("cnn", (3, 32, 32), (10,), 32, "4 conv layers, 10 logits"),
    "identity": ModelSpec("identity", (16,), (16,), 64, "returns its input"),
}

MODEL_NAMES: tuple[str, ...] = tuple(SPECS)


def get_spec(name: str) -> ModelSpec:
    """The spec of a sample model; a ValueError naming the known models otherwise."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown sample model {name!r}; known: {', '.join(MODEL_NAMES)}") from None
