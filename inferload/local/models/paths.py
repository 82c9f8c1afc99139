"""Where the sample models' sources and built artifacts live in the checkout."""

from __future__ import annotations

from pathlib import Path

import inferload


def project_root() -> Path:
    """The checkout's root (the folder holding ``model_repository/`` and ``model_store/``)."""
    return Path(inferload.__file__).resolve().parent.parent


def model_repository_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / "model_repository"


def model_store_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / "model_store"


def torchscript_path(model: str, root: Path | None = None) -> Path:
    """The TorchScript file Triton's ``1/model.py`` loads (also packed into the .mar)."""
    return model_repository_dir(root) / model / "1" / "model.pt"


def mar_path(model: str, root: Path | None = None) -> Path:
    return model_store_dir(root) / f"{model}.mar"
