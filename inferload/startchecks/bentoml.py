"""Does a BentoML service expose a target's API as the scenario sends it? Checked at start,
without running an inference.

``GET /readyz`` says the service is up and ready (BentoML answers 200 once its workers loaded);
``GET /docs.json``, the service's OpenAPI document, lists its APIs (``POST /<api>``, marked with
``x-bentoml-name``) and what each takes: the request body's media types and the JSON fields by
name. ``check_bentoml_target`` raises ``ServerError`` (cannot reach the address, not ready, or no
OpenAPI document there: not a BentoML service) and ``ModelMismatchError`` (no such API, or one that
takes another body or other fields), the message listing the APIs the service does expose.
``openapi_problems`` is the pure part, tested on a capture of the real document.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from inferload.errors import ModelMismatchError, ServerError
from inferload.scenario import limits
from inferload.scenario.headers import HeadersError
from inferload.scenario.targets import BentoMLTarget
from inferload.scenario.tls import requests_tls, tls_hint
from inferload.servermetrics.http_client import AnswerTooLarge, AnswerTooSlow, BoundedSession, connection_problem
from inferload.startchecks.fit import StartContext, StartFindings
from inferload.startchecks.model_metadata import api_operation_problem

DEFAULT_TIMEOUT_S = 5.0
#: the media type each content_type of a bentoml-http target needs the API to take
MEDIA_TYPES = {"json": "application/json", "raw": "multipart/form-data"}

if TYPE_CHECKING:
    from inferload.users.bentoml import BentoMLHttpUser


def served_apis(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """API name -> its ``post`` operation, from the OpenAPI document's paths (BentoML's own routes left out)."""
    apis: dict[str, Mapping[str, Any]] = {}
    for path, operations in (document.get("paths") or {}).items():
        post = operations.get("post") if isinstance(operations, Mapping) else None
        if isinstance(post, Mapping):
            apis[str(post.get("x-bentoml-name") or str(path).lstrip("/"))] = post
    return apis


def openapi_problems(target: BentoMLTarget, document: Mapping[str, Any]) -> list[str]:
    """Every way the target's requests do not fit the service's OpenAPI document; empty when they fit."""
    where = f"target {target.name!r}: BentoML at {target.address}"
    apis = served_apis(document)
    api = apis.get(target.model.strip("/"))
    if api is None:
        return [
            f"{where} does not expose API {target.model!r} (POST /{target.model}); it exposes: {', '.join(sorted(apis)) or 'none'}"
        ]
    problem = api_operation_problem(api)
    if problem:
        return [f"{where}: its OpenAPI document has a wrong type at paths./{target.model.strip('/')}.post.{problem}"]
    content = (api.get("requestBody") or {}).get("content") or {}
    wanted = MEDIA_TYPES.get(target.content_type or "json", "application/json")
    if content and wanted not in content:
        return [
            f"{where}: API {target.model!r} takes {', '.join(sorted(content))}, not {wanted}"
            f" (content_type {target.content_type}; use {'raw' if 'multipart/form-data' in content else 'json'})"
        ]
    schema = (content.get(wanted) or {}).get("schema") or {}
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []  # a schema by reference or none: nothing more to compare
    problems: list[str] = []
    given = [spec.name for spec in target.inputs]
    for name in given:
        if name not in properties:
            problems.append(
                f"{where}: input {name!r} is not a parameter of API {target.model!r} (it takes: {', '.join(properties)})"
            )
    for name in schema.get("required") or ():
        if name not in given:
            problems.append(f"{where}: API {target.model!r} requires parameter {name!r}, which the scenario does not give")
    return problems


def check_bentoml_target(target: BentoMLTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Raise ServerError or ModelMismatchError (see the module's docstring) unless the target fits."""
    headers = target.request_headers(Path("."))
    options: dict[str, Any] = {"headers": headers, "timeout": timeout_s, **requests_tls(target.tls)}
    with BoundedSession(limits.CHECK_DEADLINE_S) as session:
        try:
            ready = session.get(f"{target.address}/readyz", **options)
            docs = session.get(f"{target.address}/docs.json", **options)
        except AnswerTooSlow:
            raise ServerError(
                f"target {target.name!r}: BentoML at {target.address} did not finish its answers within"
                f" {limits.CHECK_DEADLINE_S:g} s"
            ) from None
        except AnswerTooLarge as error:
            raise ServerError(f"target {target.name!r}: BentoML at {target.address}: {error}") from None
        except requests.RequestException as error:
            detail = connection_problem(error)
            raise ServerError(
                f"target {target.name!r}: cannot reach BentoML at {target.address}: {detail}{tls_hint(target.tls, detail)}"
            ) from None
    if ready.status_code != 200:
        raise ServerError(
            f"target {target.name!r}: BentoML at {target.address} is not ready: GET /readyz answered HTTP {ready.status_code}"
        )
    try:
        document = docs.json() if docs.status_code == 200 else None
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, Mapping) or not isinstance(document.get("paths"), Mapping):
        raise ServerError(
            f"target {target.name!r}: {target.address} did not answer as a BentoML service"
            f" (no OpenAPI document at GET /docs.json: HTTP {docs.status_code})"
        )
    problems = openapi_problems(target, document)
    if problems:
        raise ModelMismatchError("\n".join(problems))


def start_check(cls: type[BentoMLHttpUser], context: StartContext) -> StartFindings:
    """With the checks: the service serves the target's API as the target sends it (its OpenAPI page)."""
    if not context.check:
        return StartFindings()
    try:
        check_bentoml_target(cls.target)
    except (ServerError, ModelMismatchError, HeadersError) as exc:
        return StartFindings(problems=(str(exc),))
    return StartFindings()
