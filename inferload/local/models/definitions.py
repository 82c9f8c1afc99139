"""The sample models: deterministic torch modules and the spec everything else reads.

Weights come from a fixed seed, so every build of a model produces the same TorchScript file
and the same outputs on every server. Tensor names follow the libtorch convention
(``INPUT__0`` / ``OUTPUT__0``) so the same names work on Triton's Python backend, on a
``pytorch_libtorch`` Triton and in the TorchServe handler.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from inferload.local.models.specs import INPUT_NAME, MODEL_NAMES, OUTPUT_NAME, SPECS, ModelSpec, get_spec  # noqa: F401  (re-exported)

SEED = 20240607


class TinyMLP(nn.Module):
    """FP32 [16] -> [4]: two small linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """FP32 [3,32,32] -> 10 logits; about 1.5 ms per item on one CPU thread."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(128, 128, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class Identity(nn.Module):
    """FP32 [16] -> the same tensor; nearly free, so the server is never the limit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0


_FACTORIES: dict[str, Callable[[], nn.Module]] = {
    "tiny": TinyMLP,
    "cnn": SmallCNN,
    "identity": Identity,
}


def create_model(name: str) -> nn.Module:
    """A fresh model in eval mode whose weights depend only on ``name`` (fixed seed)."""
    get_spec(name)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(SEED + sum(name.encode()))
        model = _FACTORIES[name]()
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def example_input(name: str, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """A deterministic FP32 input batch for ``name`` (used for tracing and tests)."""
    spec = get_spec(name)
    gen = torch.Generator().manual_seed(seed)
    return torch.rand((batch, *spec.input_shape), generator=gen, dtype=torch.float32)
