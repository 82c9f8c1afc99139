"""Does an OpenAI-compatible server serve a target's model? Checked at start, without generating.

``GET {base_path}/models`` lists the served models (``{"data": [{"id": ...}, ...]}``, the OpenAI
format every compatible server answers: vLLM, llama.cpp, SGLang, TGI, Triton's and KServe's OpenAI
frontends). ``check_openai_target`` raises ``ServerError`` (cannot reach the address, or no model
list there: a wrong address or ``base_path``) and ``ModelMismatchError`` (the model is not served; the
message lists those that are). ``served_models`` is the pure part.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from inferload.errors import ModelMismatchError, ServerError
from inferload.scenario import limits
from inferload.scenario.headers import HeadersError
from inferload.scenario.targets import GenerativeTarget
from inferload.scenario.tls import requests_tls, tls_hint
from inferload.servermetrics.http_client import AnswerTooLarge, AnswerTooSlow, BoundedSession, connection_problem
from inferload.startchecks.fit import StartContext, StartFindings

if TYPE_CHECKING:
    from inferload.users.generation import GenerativeUser

DEFAULT_TIMEOUT_S = 5.0
#: at most this many served models are named in a message
SHOWN_MODELS = 20


def served_models(document: object) -> list[str] | None:
    """The model ids of a ``/models`` answer, None when it is not the OpenAI list."""
    data = document.get("data") if isinstance(document, Mapping) else None
    if not isinstance(data, list):
        return None
    return [str(entry["id"]) for entry in data if isinstance(entry, Mapping) and "id" in entry]


def check_openai_target(target: GenerativeTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Raise ServerError or ModelMismatchError (see the module's docstring) unless the model is served."""
    base_path = target.generation.base_path
    url = f"{target.address}{base_path}/models"
    headers = target.request_headers(Path("."))
    options: dict[str, Any] = {"headers": headers, "timeout": timeout_s, **requests_tls(target.tls)}
    where = f"target {target.name!r}: {url}"
    with BoundedSession(limits.CHECK_DEADLINE_S) as session:
        try:
            answer = session.get(url, **options)
        except AnswerTooSlow:
            raise ServerError(f"{where} did not finish its answer within {limits.CHECK_DEADLINE_S:g} s") from None
        except AnswerTooLarge as error:
            raise ServerError(f"{where}: {error}") from None
        except requests.RequestException as error:
            detail = connection_problem(error)
            raise ServerError(f"target {target.name!r}: cannot reach {url}: {detail}{tls_hint(target.tls, detail)}") from None
    try:
        document = answer.json() if answer.status_code == 200 else None
    except (ValueError, RecursionError):
        document = None
    models = served_models(document)
    if models is None:
        raise ServerError(
            f"{where} answered HTTP {answer.status_code} without an OpenAI model list: not an OpenAI-compatible"
            f" server there, or its routes are under another base_path (generation.base_path: {base_path!r})"
        )
    if target.model not in models:
        shown = ", ".join(repr(m) for m in models[:SHOWN_MODELS]) + (", ..." if len(models) > SHOWN_MODELS else "")
        raise ModelMismatchError(f"{where} does not list model {target.model!r}; it serves: {shown or 'none'}")


def start_check(cls: type[GenerativeUser], context: StartContext) -> StartFindings:
    """With the checks: the server lists the target's model."""
    if not context.check:
        return StartFindings()
    try:
        check_openai_target(cls.target)
    except (ServerError, ModelMismatchError, HeadersError) as exc:
        return StartFindings(problems=(str(exc),))
    return StartFindings()
