"""The committed sample-model files: Triton configs that match the model specs (the built files are
checked in tests/integration/test_models.py)."""

from __future__ import annotations

import pytest

from inferload.local.models.specs import MODEL_NAMES, get_spec, model_repository_dir


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_triton_configs_match_the_model_spec(model):
    spec = get_spec(model)
    folder = model_repository_dir() / model
    for config in (folder / "config.pbtxt", folder / "configs" / "gpu_libtorch.pbtxt"):
        text = config.read_text()
        assert f'name: "{model}"' in text
        assert f"max_batch_size: {spec.max_batch_size}" in text
        assert f'name: "{spec.input_name}"' in text and f'name: "{spec.output_name}"' in text
        assert f"dims: [ {', '.join(map(str, spec.input_shape))} ]" in text
        assert f"dims: [ {', '.join(map(str, spec.output_shape))} ]" in text
        assert "dynamic_batching" in text
    assert 'backend: "python"' in (folder / "config.pbtxt").read_text()
    gpu = (folder / "configs" / "gpu_libtorch.pbtxt").read_text()
    assert 'platform: "pytorch_libtorch"' in gpu and "KIND_GPU" in gpu
