"""Start checks of the KServe kinds: the server reachable, the model served, the tensors as the model says.

kserve-v2-http reads the standard model metadata ``GET /v2/models/<m>[/versions/<v>]``,
kserve-v2-grpc the standard ``ModelMetadata`` call (``inference.GRPCInferenceService``), both
answering ``{name, versions, platform, inputs: [{name, datatype, shape}], outputs: [...]}``;
kserve-v1-http reads ``GET /v1/models/<m>`` (``{"name", "ready"}``) and, when the model is not
there, the list ``GET /v1/models``. A model the server does not serve is a ``ModelMismatchError``;
a server that cannot be reached or does not answer the protocol a ``ServerError`` (each one line
naming the target). ``check_target_against_v2`` is pure: it compares the scenario's inputs with
the metadata, where the model's first dimension -1 is the batch.

A model whose metadata has no batch dimension (Triton's ``max_batch_size: 0``: add_sub's inputs are
``[4]``, not ``[-1, 4]``) is told by rank: when every input of the scenario has the metadata's full
rank, the scenario's ``shape`` is the model's whole shape, the users send it without a batch
dimension (``model_batches`` False, as for a Triton kind) and ``batch_size`` must be 1.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import requests
from tritonclient.grpc import service_pb2

from inferload.errors import InferloadError, ModelMismatchError, ServerError
from inferload.scenario import limits
from inferload.scenario.headers import HeadersError
from inferload.scenario.targets import Target
from inferload.scenario.tls import requests_tls
from inferload.servermetrics.http_client import AnswerTooLarge, AnswerTooSlow, BoundedSession, connection_problem
from inferload.startchecks.fit import StartContext, StartFindings
from inferload.startchecks.model_metadata import metadata_problem
from inferload.users.base import InferenceUser, batched_output_names
from inferload.users.triton import open_channel

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
MODEL_METADATA_METHOD = "/inference.GRPCInferenceService/ModelMetadata"
#: gRPC codes a server answers for a model it does not serve (KServe: NOT_FOUND; Triton: UNAVAILABLE/INVALID_ARGUMENT)
_NOT_SERVED_CODES = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INVALID_ARGUMENT)
#: how grpc-core words an UNAVAILABLE of the connection, not of the model (refused, GOAWAY, a closed socket)
_TRANSPORT_WORDS = ("connect", "stream removed", "goaway", "socket closed")


def _asked(target: Target) -> str:
    return f"model {target.model!r}" + (f" version {target.version!r}" if target.version else "")


def _headers(target: Target) -> dict[str, str]:
    try:
        return target.request_headers(Path("."))
    except HeadersError as exc:
        raise ServerError(str(exc)) from None


def v2_metadata_path(target: Target) -> str:
    path = f"/v2/models/{quote(target.model, safe='')}"
    return path + f"/versions/{quote(target.version, safe='')}" if target.version else path


def _get(target: Target, path: str, timeout_s: float) -> requests.Response:
    where = f"target {target.name!r}"
    try:
        with BoundedSession(limits.CHECK_DEADLINE_S) as session:
            return session.get(target.address + path, headers=_headers(target), timeout=timeout_s, **requests_tls(target.tls))
    except AnswerTooSlow:
        raise ServerError(
            f"{where}: {target.address} did not finish its answer to GET {path} within {limits.CHECK_DEADLINE_S:g} s"
        ) from None
    except AnswerTooLarge as exc:
        raise ServerError(f"{where}: {target.address}: {exc}") from None
    except requests.Timeout:
        raise ServerError(f"{where}: cannot reach {target.address}: no answer within {timeout_s:g} s") from None
    except requests.RequestException as exc:
        raise ServerError(f"{where}: cannot reach {target.address}: {connection_problem(exc)}") from None


def _error_text(response: requests.Response) -> str:
    try:
        body = response.json()
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        text = str(body.get("error") or body.get("detail") or body.get("message") or "")
    else:
        text = response.text
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


def read_v2_metadata_http(target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    path = v2_metadata_path(target)
    response = _get(target, path, timeout_s)
    answer = f"GET {path} answered HTTP {response.status_code}: {_error_text(response)}"
    if response.status_code in (400, 404):
        raise ModelMismatchError(
            f"target {target.name!r}: the server at {target.address} does not serve {_asked(target)} ({answer})"
        )
    if response.status_code != 200:
        raise ServerError(f"target {target.name!r}: {target.address} did not answer the v2 model metadata ({answer})")
    try:
        metadata = response.json()
    except (ValueError, RecursionError):
        metadata = None
    if not isinstance(metadata, dict) or "inputs" not in metadata:
        raise ServerError(
            f"target {target.name!r}: {target.address} did not answer as an Open Inference Protocol server ({path})"
        )
    problem = metadata_problem(metadata)
    if problem:
        raise ServerError(
            f"target {target.name!r}: {target.address} did not answer as an Open Inference Protocol server ({path}):"
            f" the model's metadata has a wrong type at {problem}"
        )
    return metadata


def read_v2_metadata_grpc(target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    where = f"target {target.name!r}"
    metadata = tuple((name.lower(), value) for name, value in _headers(target).items()) or None
    channel = open_channel(target.address, target.tls, Path("."), target.name, limits.SERVER_PAGE_GRPC_OPTIONS)
    try:
        call = channel.unary_unary(
            MODEL_METADATA_METHOD,
            request_serializer=service_pb2.ModelMetadataRequest.SerializeToString,
            response_deserializer=service_pb2.ModelMetadataResponse.FromString,
        )
        request = service_pb2.ModelMetadataRequest(name=target.model, version=target.version or "")
        response = call(request, timeout=timeout_s, metadata=metadata)
    except grpc.RpcError as exc:
        code, details = exc.code(), (exc.details() or "").strip().splitlines()
        detail = details[0][:200] if details else ""
        if code in _NOT_SERVED_CODES and not any(word in detail.lower() for word in _TRANSPORT_WORDS):
            raise ModelMismatchError(
                f"{where}: the server at {target.address} does not serve {_asked(target)} (ModelMetadata answered {code.name}: {detail})"
            ) from None
        raise ServerError(
            f"{where}: cannot read the v2 model metadata at {target.address} over gRPC ({code.name}: {detail})"
        ) from None
    finally:
        channel.close()
    return {
        "name": response.name,
        "versions": list(response.versions),
        "platform": response.platform,
        **{
            section: [{"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]} for t in tensors]
            for section, tensors in (("inputs", response.inputs), ("outputs", response.outputs))
        },
    }


def read_v1_model(target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    path = f"/v1/models/{quote(target.model, safe='')}"
    response = _get(target, path, timeout_s)
    if response.status_code == 404:
        listed = _get(target, "/v1/models", timeout_s)
        if listed.status_code == 404:  # no v1 metadata route at all (TorchServe serves :predict without them)
            logger.warning(
                "target %r: %s has no KServe v1 model routes (GET %s and GET /v1/models answered HTTP 404):"
                " whether it serves %s is known at the first request; going on",
                target.name,
                target.address,
                path,
                _asked(target),
            )
            return {}
        served = ""
        if listed.status_code == 200:
            try:
                served = f"; it serves: {', '.join(str(m) for m in listed.json().get('models', [])) or 'no model'}"
            except (ValueError, AttributeError, RecursionError):
                served = ""
        raise ModelMismatchError(
            f"target {target.name!r}: the server at {target.address} does not serve {_asked(target)}"
            f" (GET {path} answered HTTP 404: {_error_text(response)}){served}"
        )
    if response.status_code != 200:
        raise ServerError(
            f"target {target.name!r}: {target.address} did not answer as a KServe v1 server"
            f" (GET {path} answered HTTP {response.status_code}: {_error_text(response)})"
        )
    try:
        answer = response.json()
    except (ValueError, RecursionError):
        answer = None
    return answer if isinstance(answer, dict) else {}


def read_kserve_model(target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The model's metadata (v2) or status (v1), by the target's kind."""
    if target.server != "kserve":
        raise ValueError(f"target {target.name!r} is a {target.kind} target, not a KServe one")
    if not target.record.v2_tensors:
        return read_v1_model(target, timeout_s)
    if target.protocol == "grpc":
        return read_v2_metadata_grpc(target, timeout_s)
    return read_v2_metadata_http(target, timeout_s)


def _metadata_inputs(metadata: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(entry.get("name")): entry for entry in metadata.get("inputs", ()) or () if isinstance(entry, Mapping)}


def _metadata_shape(entry: Mapping[str, Any]) -> list[int]:
    return [int(d) for d in entry.get("shape", ()) or ()]


def v2_model_batches(target: Target, metadata: Mapping[str, Any]) -> bool:
    """False when the model takes no batch dimension: every scenario input the metadata states has the
    metadata's full rank (``[4]`` for a scenario shape ``[4]``); True otherwise (one more dimension,
    the batch, or nothing to tell by)."""
    inputs = _metadata_inputs(metadata)
    ranks = [(len(_metadata_shape(inputs[spec.name])), len(spec.shape)) for spec in target.inputs if spec.name in inputs]
    ranks = [(model, scenario) for model, scenario in ranks if model]
    return not ranks or any(model != scenario for model, scenario in ranks)


def check_target_against_v2(target: Target, metadata: Mapping[str, Any]) -> list[str]:
    """Every way the scenario's inputs do not fit the v2 metadata (pure; empty when they fit)."""
    where, model = f"target {target.name!r}", f"model {target.model!r}"
    inputs = _metadata_inputs(metadata)
    problems: list[str] = []
    if target.batch_size != 1 and not v2_model_batches(target, metadata):
        stated = ", ".join(f"{spec.name!r} {_metadata_shape(inputs[spec.name])}" for spec in target.inputs if spec.name in inputs)
        problems.append(
            f"{where}: batch_size {target.batch_size} needs a model that batches, but the {model}'s metadata has no"
            f" batch dimension ({stated}): use batch_size 1 and give the full shape"
        )
    for spec in target.inputs:
        entry = inputs.get(spec.name)
        if entry is None:
            problems.append(
                f"{where}: input {spec.name!r} is not an input of the {model} (it has: {', '.join(inputs) or 'none'})"
            )
            continue
        datatype = str(entry.get("datatype", ""))
        if datatype and datatype != spec.dtype:
            problems.append(f"{where}: input {spec.name!r} dtype {spec.dtype} does not match the model's {datatype}")
        shape = _metadata_shape(entry)
        item = shape[1:] if len(shape) == len(spec.shape) + 1 else shape
        if shape and (len(item) != len(spec.shape) or any(m != -1 and m != s for s, m in zip(spec.shape, item, strict=False))):
            problems.append(
                f"{where}: input {spec.name!r} shape {list(spec.shape)} (per item) does not match the {model}'s {shape}"
            )
    return problems


def v2_output_shapes(target: Target, metadata: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shapes answers must have: the metadata's, its leading -1 (the batch) as the target's batch_size
    (as stated when the model takes no batch dimension)."""
    wanted = set(target.outputs)
    batches = v2_model_batches(target, metadata)
    shapes: dict[str, tuple[int, ...]] = {}
    for entry in metadata.get("outputs", ()) or ():
        if not isinstance(entry, Mapping) or (wanted and entry.get("name") not in wanted):
            continue
        dims = tuple(int(d) for d in entry.get("shape", ()) or ())
        if batches and dims and dims[0] == -1:
            dims = (target.batch_size, *dims[1:])
        if dims:
            shapes[str(entry.get("name"))] = dims
    return shapes


def kserve_findings(target: Target, check: bool, timeout_s: float = DEFAULT_TIMEOUT_S) -> StartFindings:
    """Read the target's model at start: the batch dimension (or none) and the v2 output shapes (its
    fit); with ``check``, the problems (unreachable, not served, tensors that differ), else a warning
    when unreadable."""
    from inferload.users.base import ModelFit

    try:
        info = read_kserve_model(target, timeout_s)
    except InferloadError as exc:
        if check:
            return StartFindings(problems=(str(exc),))
        logger.warning("target %r: cannot read the model's metadata (%s); going on", target.name, exc)
        return StartFindings()
    if not target.record.v2_tensors:  # v1: a model's status, no tensors to fit
        return StartFindings()
    batches = v2_model_batches(target, info)
    fit = ModelFit(
        model_batches=batches,
        expected_outputs=v2_output_shapes(target, info),
        batched_outputs=batched_output_names(info, batches),
    )
    return StartFindings(problems=tuple(check_target_against_v2(target, info)) if check else (), fit=fit)


def start_check(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    """The standard metadata (v2) or model status (v1)."""
    return kserve_findings(cls.target, context.check)
