"""What a server says its model is, held to the types inferload reads from it, before anything reads it.

The Open Inference Protocol's model metadata (Triton, KServe v2: ``inputs``/``outputs``, each a
``name``, a ``datatype`` and a ``shape``), Triton's model config (``max_batch_size``, ``input``/
``output`` with ``dims``, ``sequence_batching``'s control inputs, ``model_transaction_policy``) and
a BentoML API's operation in its OpenAPI document (``requestBody.content.<media type>.schema``'s
``properties`` and ``required``).
A dimension is an integer, or its decimal string (gRPC's JSON writes int64 so). Keys inferload does
not read may hold anything; a key it reads with a wrong type is a one-line problem naming the key's
path (``inputs[0].shape: ...``), so a start check says what the server got wrong instead of failing
somewhere downstream with a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

#: a tensor dimension: an integer, or an integer's decimal string
Dimension = StrictInt | Annotated[StrictStr, Field(pattern=r"^-?[0-9]{1,19}$")]


class _Read(BaseModel):
    """Checks the keys it names; keeps quiet about the rest."""

    model_config = ConfigDict(extra="allow")


class MetadataTensor(_Read):
    name: StrictStr
    datatype: StrictStr = ""
    shape: list[Dimension] = []


class ModelMetadata(_Read):
    inputs: list[MetadataTensor] | None = None
    outputs: list[MetadataTensor] | None = None


class ConfigTensor(_Read):
    name: StrictStr
    data_type: StrictStr = ""
    dims: list[Dimension] = []
    optional: StrictBool = False


class SequenceControl(_Read):
    kind: StrictStr = ""
    data_type: StrictStr = ""


class SequenceControlInput(_Read):
    control: list[SequenceControl] | None = None


class SequenceBatching(_Read):
    control_input: list[SequenceControlInput] | None = None


class TransactionPolicy(_Read):
    decoupled: StrictBool = False


class TritonModelConfig(_Read):
    max_batch_size: StrictInt | None = None
    input: list[ConfigTensor] | None = None
    output: list[ConfigTensor] | None = None
    sequence_batching: SequenceBatching | None = None
    model_transaction_policy: TransactionPolicy | None = None


class ApiSchema(_Read):
    properties: dict[str, Any] | None = None
    required: list[StrictStr] | None = None


class ApiMediaType(_Read):
    schema_: ApiSchema | None = Field(default=None, alias="schema")


class ApiRequestBody(_Read):
    content: dict[str, ApiMediaType | None] | None = None


class ApiOperation(_Read):
    requestBody: ApiRequestBody | None = None


def _first_problem(model: type[BaseModel], document: Mapping[str, Any]) -> str | None:
    try:
        model.model_validate(document)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        message = re.sub(r" or instance of \w+$", "", error["msg"])  # the class is ours, not the server's word
        return f"{path or 'the document'}: {message}"
    except RecursionError:
        return "nested too deep"
    return None


def metadata_problem(metadata: Mapping[str, Any]) -> str | None:
    """Why the model metadata cannot be read as the Open Inference Protocol's (None: it can)."""
    return _first_problem(ModelMetadata, metadata)


def triton_config_problem(config: Mapping[str, Any]) -> str | None:
    """Why Triton's model config (unwrapped from gRPC's ``{"config": ...}``) cannot be read (None: it can)."""
    return _first_problem(TritonModelConfig, config)


def api_operation_problem(operation: Mapping[str, Any]) -> str | None:
    """Why a BentoML API's ``post`` operation (OpenAPI) cannot be read (None: it can)."""
    return _first_problem(ApiOperation, operation)
