"""Sample models: specs (cheap), definitions (torch modules) and the build of served artifacts."""

from inferload.local.models.specs import MODEL_NAMES, SPECS, ModelSpec, get_spec

__all__ = ["MODEL_NAMES", "SPECS", "ModelSpec", "get_spec"]
