"""The sample models' specs: names, tensor names and shapes (no torch import, cheap to read).

Tensor names follow the libtorch convention (``INPUT__0`` / ``OUTPUT__0``) so the same names
work on Triton's Python backend, on a ``pytorch_libtorch`` Triton and in the TorchServe handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferload.paths import checkout_root, home_dir, samples_dir


# Where the sample models' sources and built artifacts live.
#
# Sources (each model's ``config.pbtxt`` and ``configs/``, the TorchServe ``handler.py``) are read
# from ``inferload.paths.samples_dir()``: the checkout's top-level folders, or the copies a wheel
# carries. Built artifacts (``1/model.pt``, ``1/model.py``, ``<model>.mar``) go to the
# ``artifacts_root()``: the checkout itself (next to their sources, what ``make build`` and the
# docker-compose stack use), or ``$INFERLOAD_HOME/models`` (default ``./.inferload/models``) when
# inferload is installed, where the build also copies the configs Triton reads.
def artifacts_root() -> Path:
    """The folder holding the ``model_repository/`` and ``model_store/`` the local servers load."""
    return checkout_root() or home_dir() / "models"


def model_repository_dir(root: Path | None = None) -> Path:
    return (root or artifacts_root()) / "model_repository"


def model_store_dir(root: Path | None = None) -> Path:
    return (root or artifacts_root()) / "model_store"


def torchscript_path(model: str, root: Path | None = None) -> Path:
    """The TorchScript file Triton's ``1/model.py`` loads (also packed into the .mar)."""
    return model_repository_dir(root) / model / "1" / "model.pt"


def mar_path(model: str, root: Path | None = None) -> Path:
    return model_store_dir(root) / f"{model}.mar"


def config_sources(model: str) -> Path:
    """The model's Triton configs as shipped: ``config.pbtxt`` and ``configs/*.pbtxt``."""
    return samples_dir() / "model_repository" / model


def handler_source() -> Path:
    """The TorchServe handler every sample model's .mar carries."""
    return samples_dir() / "model_store" / "handler.py"


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
