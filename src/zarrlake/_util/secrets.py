"""Keeping secrets out of what is shown: passwords in URLs, secret query parameters and the
values of secret options (one definition for reprs, logs and the command line)."""

from __future__ import annotations

import re

MASK = "***"
_URL_PASSWORD = r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*):[^@\s'\"]*@"
_QUERY_SECRET = (
    r"(?i)(?P<head>[?&;\s](?:password|passwd|secret[\w]*|[\w]*token|sslpassword)=)[^&;\s'\"]*"
)
"""Patterns compiled on first use (re's cache): what is shown is masked on its way out."""
_SECRET_KEY_WORDS = ("secret", "password", "passwd", "token", "credential", "private_key")


def is_secret_option(name: str) -> bool:
    """Whether an option of this name holds a secret (its value is never shown)."""
    lowered = name.lower().replace("-", "_")
    return any(word in lowered for word in _SECRET_KEY_WORDS)


def mask_urls(text: str) -> str:
    """`text` with URL passwords and secret query parameters masked."""
    text = re.sub(_URL_PASSWORD, rf"\g<head>:{MASK}@", text)
    return re.sub(_QUERY_SECRET, rf"\g<head>{MASK}", text)


def masked_options(options: object) -> object:
    """Storage options (a dict or (name, value) pairs) with secret values masked."""
    if isinstance(options, dict):
        return {k: MASK if is_secret_option(str(k)) else v for k, v in options.items()}
    return tuple(
        (k, MASK if is_secret_option(str(k)) else v)
        for k, v in options  # type: ignore[attr-defined]
    )
