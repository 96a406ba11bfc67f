"""Keeping secrets out of what the CLI prints or logs: passwords in URLs, secret options."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from zarrlake._util.secrets import MASK, is_secret_option, mask_urls

__all__ = ["MASK", "Redactor", "install_logging", "is_secret_option", "redact"]


class Redactor:
    """Masks URL passwords, secret query parameters and every registered secret value."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def forget(self) -> None:
        """Drop every registered secret: each run of the CLI registers its own (a process
        that runs `main` again must not mask one run's secret in the next run's output)."""
        self.values.clear()

    def add(self, values: Iterable[object]) -> None:
        """Register secret values to mask (empty and boolean values are not secrets)."""
        self.values.update(str(v) for v in values if v not in (None, "", True, False))

    def __call__(self, text: str) -> str:
        """`text` with URL passwords, secret query parameters and registered secrets masked."""
        text = mask_urls(text)
        for value in sorted(self.values, key=len, reverse=True):
            if len(value) >= 3:  # masking one letter everywhere would mangle the text
                text = text.replace(value, MASK)
        return text


redact = Redactor()


class RedactingFormatter(logging.Formatter):
    """Log records pass through `redact` before they reach stderr."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatted log record with secrets masked."""
        return redact(super().format(record))


def install_logging() -> None:
    """Warnings and errors from libraries go to stderr, redacted, in one short line each."""
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("zarrlake: %(levelname)s: %(name)s: %(message)s"))
    root = logging.getLogger()
    if not root.handlers:  # leave a host's logging (pytest, an application) alone
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
