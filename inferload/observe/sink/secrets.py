"""Keep secrets (tokens, passwords) out of logs, messages and result files."""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<password>[^@/\s]+)@")


def mask_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every secret value, and any `user:password@` in a URL, replaced by ***."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
