"""Does TorchServe serve a target's model? Checked at start, without running an inference.

The inference API answers ``OPTIONS /predictions/<model>[/<version>]`` with the model's API
description (200) when it serves that model, and with 404 ``ModelNotFoundException`` or
``ModelVersionNotFoundException`` when it does not; nothing is sent to the model's handler. When
the target has a ``management_url``, the management API then lists the models the server does
serve (``GET /models``, ``GET /models/<model>/all``) for the message.

The probe carries the target's own headers (``headers``, ``headers_from_env``, the inference key of
its ``token_file``), and the management API the ``token_file``'s management key: with TorchServe's
token authorization on, an answer refusing the token (HTTP 400 ``InvalidKeyException``, or 401/403)
is a ``ServerError`` saying to give a ``token_file`` (or that its key may have expired).

``check_torchserve_target`` raises ``ServerError`` (cannot reach the address, or it does not answer
as TorchServe's inference API), ``ModelMismatchError`` (the model or version is not served), and
returns a warning when the answer settles nothing (a proxy that refuses OPTIONS, say).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from inferload.errors import ModelMismatchError, ServerError
from inferload.scenario import limits
from inferload.scenario.headers import HeadersError, read_management_key
from inferload.scenario.targets import Target, TorchServeTarget, static_sequence_id_note
from inferload.scenario.tls import describe_tls, requests_tls, tls_hint
from inferload.servermetrics.http_client import AnswerTooLarge, AnswerTooSlow, BoundedSession, connection_problem, not_http_answer
from inferload.startchecks.fit import StartContext, StartFindings

DEFAULT_TIMEOUT_S = 5.0
#: TorchServe's answer (the JSON "type" of a 404) when it does not serve the model or version asked for
NOT_SERVED = ("ModelNotFoundException", "ModelVersionNotFoundException")
#: TorchServe 0.12's answer (HTTP 400) when token authorization is on and the request's token is missing or wrong
TOKEN_REFUSED = "InvalidKeyException"
#: TorchServe's answer (HTTP 403, JSON "status") to plain HTTP on an inference address it serves over HTTPS
HTTPS_ONLY = "only accepts HTTPS"
#: pages of ``GET /models`` read at most (each lists up to ``_PAGE`` models)
_MAX_PAGES = 10
_PAGE = 1000

if TYPE_CHECKING:
    from inferload.users.torchserve import TorchServeRestUser


def _predictions_path(target: Target) -> str:
    path = f"/predictions/{quote(target.model, safe='')}"
    return path + f"/{quote(target.version, safe='')}" if target.version else path


def _asked(target: Target) -> str:
    return f"model {target.model!r}" + (f" version {target.version!r}" if target.version else "")


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except (ValueError, RecursionError):
        return None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


def check_torchserve_target(target: TorchServeTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """None when TorchServe at the target's address serves its model; a warning when that could not
    be told; ``ServerError`` / ``ModelMismatchError`` (one line naming the target) otherwise."""
    if target.server != "torchserve":
        raise ValueError(f"target {target.name!r} is a {target.kind} target, not a TorchServe one")
    where = f"target {target.name!r}"
    probe = f"OPTIONS {_predictions_path(target)}"
    try:  # the requests' own headers (a token among them): TorchServe refuses the probe without them
        headers = target.request_headers(Path("."))
    except HeadersError as exc:
        raise ServerError(str(exc)) from None
    try:
        with BoundedSession(limits.CHECK_DEADLINE_S) as session:
            response = session.request(
                "OPTIONS",
                target.address + _predictions_path(target),
                headers=headers,
                timeout=timeout_s,
                **requests_tls(target.tls),
            )
    except AnswerTooSlow:
        raise ServerError(
            f"{where}: TorchServe at {target.address} did not finish its answer to {probe} within {limits.CHECK_DEADLINE_S:g} s"
        ) from None
    except AnswerTooLarge as exc:
        raise ServerError(f"{where}: TorchServe at {target.address}: {exc}") from None
    except requests.Timeout:
        raise ServerError(f"{where}: cannot reach TorchServe at {target.address}: no answer within {timeout_s:g} s") from None
    except requests.exceptions.SSLError as exc:
        raise ServerError(
            f"{where}: cannot reach TorchServe at {target.address}: {connection_problem(exc)}"
            f" with {describe_tls(target.tls)}; check ca_file, server_name and the client certificate"
        ) from None
    except requests.ConnectionError as exc:
        if not_http_answer(exc):
            raise ServerError(
                f"{where}: {target.address} did not answer as TorchServe's HTTP inference API (is it a gRPC port?)"
                + tls_hint(target.tls, repr(exc))
            ) from None
        raise ServerError(f"{where}: cannot reach TorchServe at {target.address}: {connection_problem(exc)}") from None
    except requests.RequestException as exc:
        raise ServerError(f"{where}: cannot reach TorchServe at {target.address}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 200:
        return static_sequence_id_note(target.name, target.kind, target.headers, target.sequence)
    body = _json(response)
    kind = body.get("type") if isinstance(body, dict) else None
    message = (body.get("message") or body.get("status")) if isinstance(body, dict) else None
    answer = f"HTTP {response.status_code}" + (f" {kind}" if kind else "") + f": {message or _first_line(response.text)}"
    if response.status_code == 403 and HTTPS_ONLY in str(message):  # plain http:// to TorchServe's TLS port
        raise ServerError(
            f"{where}: TorchServe at {target.address} serves HTTPS only ({probe} answered {answer});"
            " write https:// in the address (and the server's CA in tls.ca_file unless the system trusts it)"
        )
    if response.status_code in (400, 401, 403) and (kind == TOKEN_REFUSED or response.status_code != 400):
        fix = (
            "is the key in token_file current? (TorchServe's keys expire; it rewrites key_file.json)"
            if target.token_file
            else "give the target a token_file (TorchServe's key_file.json, written in the folder it was started from)"
        )
        raise ServerError(
            f"{where}: TorchServe at {target.address} refused the request's authorization ({probe} answered {answer}); {fix}"
        )
    if response.status_code == 404 and kind in NOT_SERVED:
        raise ModelMismatchError(
            f"{where}: TorchServe at {target.address} does not serve {_asked(target)} ({probe} answered {answer}); "
            + _served_models(target, timeout_s)
        )
    if response.status_code == 404:
        raise ServerError(
            f"{where}: {target.address} did not answer as TorchServe's inference API ({probe} answered {answer});"
            " is it the management or metrics port, or another server?"
        )
    return f"{where}: could not check that TorchServe at {target.address} serves {_asked(target)} ({probe} answered {answer})"


def _served_models(target: TorchServeTarget, timeout_s: float) -> str:
    """What the management API says is served (the model's versions when it is served), for the message."""
    if target.management_url is None:
        return "give the target a management_url (TorchServe's management API, e.g. http://127.0.0.1:8081) to list the models it serves"
    base = target.management_url
    try:
        management_key = read_management_key(Path(target.token_file)) if target.token_file else None
    except HeadersError as error:
        return f"the served models could not be listed from management_url {base}: {error}"
    try:
        with BoundedSession(limits.CHECK_DEADLINE_S) as session:
            if base.startswith("https://"):  # the target's TLS settings serve its management API too
                for key, value in requests_tls(target.tls).items():
                    setattr(session, key, value)
            if management_key:
                session.headers["Authorization"] = f"Bearer {management_key}"
            names = _model_names(session, base, timeout_s)
            if target.model in names and target.version:
                url = f"{base}/models/{quote(target.model, safe='')}/all"
                answer = session.get(url, timeout=timeout_s)
                answer.raise_for_status()
                versions = sorted(str(entry.get("modelVersion")) for entry in answer.json() if isinstance(entry, dict))
                return f"it serves model {target.model!r} in version(s): {', '.join(versions) or 'none'} (GET {url})"
    except AnswerTooSlow:
        return f"the served models could not be listed from management_url {base}: no whole answer within {limits.CHECK_DEADLINE_S:g} s"
    except requests.Timeout:
        return f"the served models could not be listed from management_url {base}: no answer within {timeout_s:g} s"
    except requests.ConnectionError as exc:
        return f"the served models could not be listed from management_url {base}: {connection_problem(exc)}"
    except requests.HTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        return f"the served models could not be listed from management_url {base}: GET answered HTTP {status}"
    except (requests.RequestException, ValueError, AttributeError, RecursionError) as exc:
        return f"the served models could not be listed from management_url {base}: {type(exc).__name__}"
    return f"it serves: {', '.join(sorted(names)) or 'no model'} (GET {base}/models)"


def _model_names(session: requests.Session, base: str, timeout_s: float) -> list[str]:
    """Every model name ``GET /models`` lists, page after page."""
    names: list[str] = []
    token: str | None = None
    for _ in range(_MAX_PAGES):
        params: dict[str, str | int] = {"limit": _PAGE}
        if token:
            params["next_page_token"] = token
        answer = session.get(f"{base}/models", params=params, timeout=timeout_s)
        answer.raise_for_status()
        page = answer.json()
        names += [str(entry.get("modelName")) for entry in page.get("models", []) if isinstance(entry, dict)]
        token = page.get("nextPageToken")
        if not token:
            break
    return names


def start_check(cls: type[TorchServeRestUser], context: StartContext) -> StartFindings:
    """With the checks: TorchServe serves the model and answers the target's request (a warning for what
    it cannot check)."""
    if not context.check:
        return StartFindings()
    try:
        warning = check_torchserve_target(cls.target)
    except (ServerError, ModelMismatchError) as exc:
        return StartFindings(problems=(str(exc),))
    return StartFindings(warnings=(warning,) if warning else ())
