"""Does the scenario match the model Triton serves? Checked before any load is sent.

``check_target_against_triton`` is pure: it compares a target's tensors with the model metadata
and config Triton returns (``GET v2/models/<m>[/versions/<v>]`` and ``.../config``, as JSON
dicts; the gRPC client's ``as_json=True`` forms, with int64 values as strings and the config
wrapped in ``{"config": ...}``, are accepted too) and returns one message per mismatch.
``fetch_triton_model_info`` gets those two dicts from a running server; when it cannot, its error
says why in one line: the server cannot be reached, it does not answer as Triton over the
target's protocol, or it does not serve the model (and then which models it serves). TorchServe
targets are checked in ``inferload.startchecks.torchserve``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from inferload.errors import ModelMismatchError, ServerError
from inferload.scenario import limits
from inferload.scenario.expected import read_expected
from inferload.scenario.headers import HeadersError
from inferload.scenario.kinds import GENERATIVE_KINDS
from inferload.scenario.targets import Target, sequence_of
from inferload.scenario.tls import requests_tls, tls_hint
from inferload.servermetrics.http_client import (
    AnswerTooLarge,
    AnswerTooSlow,
    BoundedSession,
    connection_problem,
    not_http_answer,
    use_server_name,
)
from inferload.startchecks.fit import ModelInfo, StartContext, StartFindings
from inferload.startchecks.model_metadata import metadata_problem, triton_config_problem
from inferload.users.sequence import SequenceSettings
from inferload.users.tls import grpc_credentials

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from inferload.users.base import InferenceUser, ModelFit


# Is a Triton model a sequence (stateful) model, and how are its target's users to drive it?
#
# Read from the model's config as Triton returns it (HTTP JSON, or gRPC's ``as_json`` form wrapped
# in ``{"config": ...}``): a ``sequence_batching`` section makes it a sequence model, whose every
# request needs a correlation ID and START/END flags (``inferload.users.sequence``). A
# ``CONTROL_SEQUENCE_CORRID`` control input of ``TYPE_STRING`` means string correlation IDs.
#
# - a sequence model and a target without ``sequence``: driven with the defaults, and the run says so
#   (``default_sequence_note``);
# - ``sequence`` on a model that is not a sequence model: a start error (``sequence_problems``);
# - a decoupled sequence model: a start error (the streaming user sends no sequence IDs yet).
def _config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("config")
    return inner if isinstance(inner, Mapping) else config


def triton_sequence_batching(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The model's ``sequence_batching`` section; None when it is not a sequence model."""
    section = _config(config).get("sequence_batching")
    return section if isinstance(section, Mapping) else None


def triton_string_correlation_ids(config: Mapping[str, Any]) -> bool:
    """True when the model takes its correlation ID as a string (``CONTROL_SEQUENCE_CORRID``, ``TYPE_STRING``)."""
    section = triton_sequence_batching(config) or {}
    for control_input in section.get("control_input", ()) or ():
        for control in control_input.get("control", ()) or ():
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID" and control.get("data_type") == "TYPE_STRING":
                return True
    return False


def sequence_settings_for(target: Target, config: Mapping[str, Any]) -> SequenceSettings | None:
    """How the target's users drive the model: None unless it is a sequence model."""
    if triton_sequence_batching(config) is None:
        return None
    return SequenceSettings.from_spec(sequence_of(target), triton_string_correlation_ids(config))


def default_sequence_note(target: Target, config: Mapping[str, Any]) -> str | None:
    """What the run says when it drives a sequence model with the default settings (no ``sequence`` key)."""
    settings = sequence_settings_for(target, config)
    if settings is None or sequence_of(target) is not None:
        return None
    return (
        f"target {target.name!r}: model {target.model!r} is a sequence model (sequence_batching in its config);"
        f" each user sends sequences of {settings.length} requests, {settings.concurrent} open at a time"
        " (set the target's sequence: {length, concurrent} to choose)"
    )


def sequence_problems(target: Target, config: Mapping[str, Any]) -> list[str]:
    """Why the target cannot drive the model as a sequence model as its scenario says; empty when it can."""
    where = f"target {target.name!r}"
    model = f"model {target.model!r}"
    if triton_sequence_batching(config) is None:
        if sequence_of(target) is None:
            return []
        return [
            f"{where}: sequence is set, but the {model} is not a sequence model (its config has no"
            " sequence_batching): remove the target's sequence key"
        ]
    policy = _config(config).get("model_transaction_policy")
    if isinstance(policy, Mapping) and policy.get("decoupled") is True:
        return [
            f"{where}: the {model} is a decoupled sequence model (sequence_batching and model_transaction_policy.decoupled):"
            " inferload does not drive decoupled sequence models yet"
        ]
    return []


DEFAULT_TIMEOUT_S = 5.0


def _unwrap_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("config")
    return inner if isinstance(inner, Mapping) else config


def _dims(values: Sequence[Any]) -> list[int]:
    return [int(value) for value in values]


def _datatype_from_config(data_type: str) -> str:
    name = data_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def triton_model_batches(config: Mapping[str, Any]) -> bool:
    """True when the model takes a batch dimension (``max_batch_size > 0``).

    A user sending to a model that does not batch sends each input without the batch dimension
    (the scenario's ``shape`` is then the model's full shape and ``batch_size`` is 1).
    """
    return int(_unwrap_config(config).get("max_batch_size", 0) or 0) > 0


def triton_model_decoupled(config: Mapping[str, Any]) -> bool:
    """True for a decoupled model (``model_transaction_policy { decoupled: true }``): it answers a
    request with zero or more responses, over the gRPC stream only."""
    policy = _unwrap_config(config).get("model_transaction_policy")
    return isinstance(policy, Mapping) and policy.get("decoupled") is True


def _model_tensors(
    metadata: Mapping[str, Any], config: Mapping[str, Any], section: str
) -> dict[str, tuple[str, list[int], bool]]:
    """name → (datatype, per-item dims, optional) for ``section`` 'input' or 'output'."""
    batches = triton_model_batches(config)
    tensors: dict[str, tuple[str, list[int], bool]] = {}
    for entry in metadata.get(f"{section}s", ()) or ():
        shape = _dims(entry.get("shape", ()))
        if batches and shape:
            shape = shape[1:]
        tensors[entry["name"]] = (str(entry.get("datatype", "")), shape, False)
    for entry in _unwrap_config(config).get(section, ()) or ():
        name = entry["name"]
        datatype, shape, _ = tensors.get(name, ("", [], False))
        if "dims" in entry:
            shape = _dims(entry["dims"])
        if not datatype and "data_type" in entry:
            datatype = _datatype_from_config(str(entry["data_type"]))
        tensors[name] = (datatype, shape, bool(entry.get("optional", False)))
    return tensors


def _shape_matches(wanted: Sequence[int], model: Sequence[int]) -> bool:
    return len(wanted) == len(model) and all(dim == -1 or dim == size for size, dim in zip(wanted, model, strict=False))


def check_target_against_triton(target: Target, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Every way ``target`` does not fit the served model; empty when it fits."""
    if target.server != "triton":
        raise ValueError(f"target {target.name!r} is a {target.kind} target, not a Triton one")
    where = f"target {target.name!r}"
    model = f"model {target.model!r}"
    problems: list[str] = []
    if target.protocol == "http" and triton_model_decoupled(config):
        problems.append(
            f"{where}: the {model} is decoupled (model_transaction_policy.decoupled in its config): it answers"
            " over Triton's gRPC stream only, which HTTP cannot carry; use kind: triton-grpc and the gRPC port"
        )
    max_batch_size = int(_unwrap_config(config).get("max_batch_size", 0) or 0)
    if max_batch_size > 0 and target.batch_size > max_batch_size:
        problems.append(
            f"{where}: batch_size {target.batch_size} is more than the max_batch_size {max_batch_size} of the {model}"
        )
    if max_batch_size == 0 and target.batch_size != 1:
        problems.append(
            f"{where}: batch_size {target.batch_size} needs a model that batches, but the {model} has"
            " max_batch_size 0 (use batch_size 1 and give the full shape)"
        )

    inputs = _model_tensors(metadata, config, "input")
    for spec in target.inputs:
        if spec.name not in inputs:
            problems.append(
                f"{where}: input {spec.name!r} is not an input of the {model} (it has: {', '.join(inputs) or 'none'})"
            )
            continue
        datatype, shape, _ = inputs[spec.name]
        if datatype and datatype != spec.dtype:
            problems.append(f"{where}: input {spec.name!r} dtype {spec.dtype} does not match the model's {datatype}")
        if not _shape_matches(spec.shape, shape):
            problems.append(f"{where}: input {spec.name!r} shape {list(spec.shape)} does not match the model's {shape}")
    given = {spec.name for spec in target.inputs}
    for name, (datatype, shape, optional) in inputs.items():
        if name not in given and not optional:
            problems.append(
                f"{where}: the {model} requires input {name!r} ({datatype} {shape}), which the scenario does not give"
            )

    problems.extend(sequence_problems(target, config))
    outputs = _model_tensors(metadata, config, "output")
    for name in target.outputs:
        if name not in outputs:
            problems.append(f"{where}: output {name!r} is not an output of the {model} (it has: {', '.join(outputs) or 'none'})")
    problems.extend(_expected_output_problems(target, outputs, where, model))
    return problems


def _expected_output_problems(target: Target, outputs: Mapping[str, Any], where: str, model: str) -> list[str]:
    """``response_check: expected``: every output named in the expected file is an output of the model."""
    if target.expected is None or target.response_check != "expected":
        return []
    try:
        names = read_expected(Path(target.expected.path), target.kind).arrays
    except ValueError as error:
        return [f"{where}: expected: {error}"]
    return [
        f"{where}: expected: {Path(target.expected.path).name} has output {name!r}, which is not an output of the {model}"
        f" (it has: {', '.join(outputs) or 'none'})"
        for name in names
        if name not in outputs
    ]


def fetch_triton_model_info(target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, config) of the target's model from the running Triton.

    Raises ``ServerError`` when the server cannot be reached or does not answer as Triton over
    the target's protocol (an HTTP target on the gRPC port, or the other way round),
    ``ModelMismatchError`` when it is up but does not serve the model (or that version): its
    message lists the models the server does serve (its repository index).
    """
    if target.server != "triton":
        raise ValueError(f"target {target.name!r} is a {target.kind} target, not a Triton one")
    if target.protocol == "http":
        metadata, config = _fetch_over_http(target, timeout_s)
    else:
        metadata, config = _fetch_over_grpc(target, timeout_s)
    for what, problem in (("metadata", metadata_problem(metadata)), ("config", triton_config_problem(config))):
        if problem:
            raise _wrong_protocol(target, f"the model's {what} has a wrong type at {problem}", "is it Triton?")
    return metadata, config


def served_triton_models(index: Sequence[Mapping[str, Any]]) -> str:
    """Triton's repository index (``[{"name", "version", "state"}]``) → ``cnn 1, tiny 1 (UNAVAILABLE)``."""
    names = []
    for entry in sorted(index, key=lambda e: (str(e.get("name", "")), str(e.get("version", "")))):
        text = " ".join(str(part) for part in (entry.get("name", "?"), entry.get("version")) if part)
        state = str(entry.get("state") or "")
        names.append(text if state in ("", "READY") else f"{text} ({state})")
    return ", ".join(names) or "no model"


def _not_served(target: Target, detail: str, index: Sequence[Mapping[str, Any]] | str) -> ModelMismatchError:
    version = f" version {target.version}" if target.version else ""
    if isinstance(index, str):
        served = f"the served models could not be listed ({index})"
    else:
        served = f"it serves: {served_triton_models(index)}"
    return ModelMismatchError(
        f"target {target.name!r}: Triton at {target.address} ({target.kind}) does not serve model {target.model!r}{version}"
        f" ({detail}); {served} (repository index)"
    )


def _unreachable(target: Target, detail: str) -> ServerError:
    return ServerError(
        f"target {target.name!r}: cannot reach Triton at {target.address} ({target.kind}): {detail}{tls_hint(target.tls, detail)}"
    )


def _wrong_protocol(target: Target, detail: str, hint: str = "") -> ServerError:
    """The address answers, but not as Triton over the target's protocol."""
    protocol, other = ("HTTP", "gRPC") if target.protocol == "http" else ("gRPC", "HTTP")
    hint = hint or f"is it the {other} port?"
    return ServerError(
        f"target {target.name!r}: {target.address} did not answer as Triton {protocol} ({hint}): {detail}"
        + tls_hint(target.tls, detail)
    )


#: how Triton words a refusal of an API restricted to requests with a header (HTTP 403; gRPC UNAVAILABLE)
_RESTRICTED = "is restricted, expecting header"


def _check_headers(target: Target) -> dict[str, str] | None:
    """The target's own headers (static and from the environment) for the start checks' calls too:
    a Triton that restricts its metadata or model-config APIs to a header answers them then."""
    # token_file is TorchServe's only, so no path is resolved here
    return target.request_headers(Path(".")) or None


def _restricted(target: Target, detail: str) -> ServerError:
    return ServerError(
        f"target {target.name!r}: Triton at {target.address} ({target.kind}) refused to give model {target.model!r}'s"
        f" metadata or config: {detail} (give it in the target's headers or headers_from_env; the start checks send them)"
    )


def _fetch_over_http(target: Target, timeout_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Triton's HTTP API read as tritonclient.http reads it (``v2/health/live``, the model's metadata
    and config, the repository index when the model is not served), each answer whole within one
    deadline for the check and the page bound (a server that drips or floods is cut off)."""
    scheme = "https" if target.tls is not None else "http"
    base = target.address if "://" in target.address else f"{scheme}://{target.address}"
    model = f"v2/models/{quote(target.model, safe='')}"
    if target.version:
        model += f"/versions/{quote(target.version, safe='')}"
    options: dict[str, Any] = {"headers": _check_headers(target), "timeout": timeout_s, **requests_tls(target.tls)}
    with BoundedSession(limits.CHECK_DEADLINE_S) as session:
        use_server_name(session, target.tls.server_name if target.tls is not None else None)
        try:
            try:
                live = session.get(f"{base}/v2/health/live", **options).status_code == 200
            except requests.ConnectionError as error:
                if not_http_answer(error):
                    raise _wrong_protocol(target, "its answer is not HTTP/1.1") from None
                raise
            if not live:
                raise _wrong_protocol(target, "GET v2/health/live did not answer 200 OK", "is it another server's port?")
            metadata = session.get(f"{base}/{model}", **options)
            config = session.get(f"{base}/{model}/config", **options) if metadata.status_code == 200 else metadata
            refusal = next((answer for answer in (metadata, config) if answer.status_code != 200), None)
            if refusal is not None:
                message = _triton_error(refusal)
                if _RESTRICTED in message:
                    raise _restricted(target, message)
                raise _not_served(target, message, _http_index(session, base, options))
        except AnswerTooSlow:
            raise _unreachable(target, f"its answers did not end within the check's {limits.CHECK_DEADLINE_S:g} s") from None
        except AnswerTooLarge as error:
            raise _unreachable(target, str(error)) from None
        except requests.Timeout:
            raise _unreachable(target, f"no answer within {timeout_s:g} s") from None
        except requests.RequestException as error:
            raise _unreachable(target, connection_problem(error)) from None
    return _json_object(target, metadata, "metadata"), _json_object(target, config, "config")


def _triton_error(answer: requests.Response) -> str:
    """Triton's reason for an answer other than 200 (its JSON ``error``, else the body's first line)."""
    try:
        body = answer.json()
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])
    lines = answer.text.strip().splitlines()
    return lines[0][:200] if lines else f"HTTP {answer.status_code}"


def _json_object(target: Target, answer: requests.Response, what: str) -> dict[str, Any]:
    """The JSON object of a 200 answer; ServerError (naming the target and the page) for anything else."""
    try:
        body = answer.json()
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise _wrong_protocol(target, f"the model's {what} ({answer.url}) is not a JSON object", "is it another server's port?")
    return body


def _http_index(session: requests.Session, base: str, options: dict[str, Any]) -> list[dict[str, Any]] | str:
    """Triton's repository index over HTTP (``POST v2/repository/index``), or why it could not be read."""
    try:
        answer = session.post(f"{base}/v2/repository/index", **options)
        if answer.status_code != 200:
            return _triton_error(answer)
        index = answer.json()
    except (requests.RequestException, ValueError, RecursionError) as error:
        return str(error) or type(error).__name__
    if not isinstance(index, list):
        return "the repository index is not a JSON list"
    return [entry for entry in index if isinstance(entry, dict)]


#: what gRPC says when the port answers, but not with HTTP/2 (an HTTP/1.x server, or one that hangs up)
_NOT_GRPC = ("Socket closed", "http1.x", "Failed parsing HTTP/2")


def _fetch_over_grpc(target: Target, timeout_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    import tritonclient.grpc as triton_grpc
    from tritonclient.utils import InferenceServerException

    bounded = limits.SERVER_PAGE_GRPC_OPTIONS  # tritonclient's own defaults take 2 GiB messages and retry
    if target.tls is None:
        client = triton_grpc.InferenceServerClient(url=target.address, channel_args=bounded)
    else:
        credentials, options = grpc_credentials(target.tls, Path("."), target.name)
        client = triton_grpc.InferenceServerClient(url=target.address, creds=credentials, channel_args=[*bounded, *options])
    # gRPC metadata keys are lower case
    headers = {name.lower(): value for name, value in (_check_headers(target) or {}).items()} or None
    try:
        try:
            client.is_server_live(headers=headers, client_timeout=timeout_s)
        except InferenceServerException as error:
            message = error.message() or str(error)
            if target.tls is None and any(sign in message for sign in _NOT_GRPC):  # with TLS: the handshake's problem
                raise _wrong_protocol(target, message) from None
            raise _unreachable(target, message) from None
        except (AttributeError, TypeError):  # an OK status without its message: grpcio hands tritonclient None
            raise _wrong_protocol(target, "its answer to ServerLive was cut short (no message)", "is it Triton?") from None
        try:
            version = target.version or ""
            metadata = client.get_model_metadata(target.model, version, headers, as_json=True, client_timeout=timeout_s)
            config = client.get_model_config(target.model, version, headers, as_json=True, client_timeout=timeout_s)
        except InferenceServerException as error:
            if _RESTRICTED in (error.message() or ""):  # Triton answers UNAVAILABLE: not the network's fault
                raise _restricted(target, error.message()) from None
            if str(error.status()) in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"):
                raise _unreachable(target, error.message() or str(error)) from None
            raise _not_served(target, error.message() or str(error), _grpc_index(client, timeout_s, headers)) from None
        except (AttributeError, TypeError):  # as above: an answer without its message
            raise _wrong_protocol(target, "its answer to the model's metadata or config was cut short", "is it Triton?") from None
    finally:
        client.close()
    if not isinstance(metadata, Mapping) or not isinstance(config, Mapping):
        raise _wrong_protocol(target, "the model's metadata or config is not an object", "is it Triton?")
    return dict(metadata), dict(_unwrap_config(config))


def _grpc_index(client: Any, timeout_s: float, headers: dict[str, str] | None) -> list[dict[str, Any]] | str:
    """Triton's repository index over gRPC (``RepositoryIndex``), or why it could not be read."""
    from tritonclient.utils import InferenceServerException

    try:
        return list(client.get_model_repository_index(headers, as_json=True, client_timeout=timeout_s).get("models", []))
    except InferenceServerException as error:
        return error.message() or str(error)


def model_fit(target: Target, info: ModelInfo) -> ModelFit:
    """What the model is, for the target's requests and answers: whether it takes a batch dimension,
    the output shapes answers must have, a sequence model's correlation IDs and flags, and whether
    it is decoupled (the run says when it uses the default sequence settings)."""
    from inferload.users.base import ModelFit, batched_output_names, expected_output_shapes  # Locust: a run's own import

    metadata, config = info
    batches = triton_model_batches(config)
    model_config = config.get("config", config)  # gRPC's JSON wraps it
    max_batch = int(model_config.get("max_batch_size", 0) or 0) if batches else 0
    note = default_sequence_note(target, config)
    if note:
        logger.info("%s", note)
    return ModelFit(
        model_batches=batches,
        expected_outputs=expected_output_shapes(target, metadata, max_batch),
        batched_outputs=batched_output_names(metadata, max_batch > 0),
        sequence_settings=sequence_settings_for(target, config),  # None unless a sequence model
        decoupled=triton_model_decoupled(config),
    )


def _said_decoupled(cls: type[InferenceUser], fit: ModelFit) -> None:
    from inferload.users.triton import TritonStreamUser

    if fit.decoupled and issubclass(cls, TritonStreamUser):
        logger.info(
            "target %r: model %r is decoupled: each user sends its requests over one gRPC stream (ModelStreamInfer)",
            cls.target.name,
            cls.target.model,
        )


#: the input Triton's generate extension fills from the request's ``text_input``
GENERATE_INPUT = "text_input"


def generate_findings(target: Target, metadata: Mapping[str, Any]) -> StartFindings:
    """A triton-generate target's model: a warning when it has no ``text_input`` input (the
    extension maps the request's keys to inputs by name, so its prompts would reach no input)."""
    inputs = [str(entry.get("name")) for entry in metadata.get("inputs") or () if isinstance(entry, Mapping)]
    if inputs and GENERATE_INPUT not in inputs:
        return StartFindings(
            warnings=(
                f"target {target.name!r}: model {target.model!r} has no input {GENERATE_INPUT!r} (it takes"
                f" {', '.join(inputs)}): Triton's generate puts the prompt in text_input",
            )
        )
    return StartFindings()


def start_check(cls: type[InferenceUser], context: StartContext) -> StartFindings:
    """Fits the user class to the model (read once, or as the master shipped it); with the checks,
    the target's headers and tensors against the model's metadata and config. A triton-generate
    target sends no tensors: its model is served (`generate_findings` on its metadata)."""
    target = cls.target
    if target.kind in GENERATIVE_KINDS:
        if not context.check:
            return StartFindings()
        try:
            target.request_headers(context.base_dir)
            metadata, _ = context.infos.read(target)
        except (HeadersError, ServerError, ModelMismatchError) as exc:
            return StartFindings(problems=(str(exc),))
        return generate_findings(target, metadata)
    if not context.check:
        info = context.infos.get(target)  # a warning when unreadable
        if info is None:
            return StartFindings()
        fit = model_fit(target, info)
        _said_decoupled(cls, fit)
        return StartFindings(fit=fit)
    try:  # the users would stop at start without them: say so before any load
        target.request_headers(context.base_dir)
        info = context.infos.read(target)
    except (HeadersError, ServerError, ModelMismatchError) as exc:
        return StartFindings(problems=(str(exc),))
    fit = model_fit(target, info)
    _said_decoupled(cls, fit)
    return StartFindings(problems=tuple(check_target_against_triton(target, *info)), fit=fit)
