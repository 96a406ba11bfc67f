"""Allowed virtual sources: the URL prefixes a repository's virtual chunk references may
point into, held in the metastore next to the refs (`vsource/<prefix>` in the refs
partition), so every client (Python, command line, Spark tasks) checks the same list.

Only `Repo.add_virtual_source`/`remove_virtual_source` and `zarrlake virtual sources
add`/`remove` change it; writing a reference outside every allowed prefix is refused before
anything is staged (references already committed stay readable whatever the list says).
"""

from __future__ import annotations

from collections.abc import Iterable

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.metastore.base import MetaStore
from zarrlake.storage.sources import split_url

PREFIX = b"vsource/"


def check_source_prefix(prefix: object) -> str:
    """A file:///absolute/dir or s3://bucket[/prefix] URL prefix, without trailing '/'."""
    if not isinstance(prefix, str):
        raise InvalidInputError(f"a virtual source prefix must be a URL string, not {prefix!r}")
    trimmed = prefix.rstrip("/")
    _, bucket, path = split_url(trimmed if trimmed.count("/") > 2 else prefix)
    if not (bucket or path):
        raise InvalidInputError(
            f"virtual source prefix {prefix!r} must name a directory or bucket, not a whole "
            "file system"
        )
    return trimmed


def allowed_by(url: str, prefix: str) -> bool:
    """Whether `url` lies under `prefix` (whole path segments only)."""
    return url == prefix or url.startswith(prefix + "/")


class VirtualSources:
    """Reads and changes the allowed virtual source prefixes of one repository."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    def add(self, prefix: str) -> str:
        """Allow virtual references under `prefix`; adding one twice changes nothing."""
        prefix = check_source_prefix(prefix)
        self.meta.set(self.partition, PREFIX + prefix.encode(), b"")
        return prefix

    def remove(self, prefix: str) -> str:
        """Stop allowing new virtual references under `prefix`; NotFoundError if it is not
        one of the allowed prefixes (its subdirectories are not: name the prefix itself)."""
        prefix = check_source_prefix(prefix)
        key = PREFIX + prefix.encode()
        if self.meta.get(self.partition, key) is None:
            allowed = ", ".join(self.prefixes()) or "none"
            raise NotFoundError(
                f"virtual source prefix {prefix!r} is not allowed, so there is nothing to "
                f"remove (allowed: {allowed})"
                "; give one of the allowed prefixes"
            )
        self.meta.delete(self.partition, key)
        return prefix

    def prefixes(self) -> list[str]:
        """The allowed virtual source prefixes."""
        return [
            k[len(PREFIX) :].decode() for k, _, _ in self.meta.scan(self.partition, prefix=PREFIX)
        ]

    def check(self, urls: Iterable[str]) -> None:
        """InvalidInputError naming the first URL outside every allowed prefix."""
        allowed = self.prefixes()
        for url in urls:
            split_url(url)
            if not any(allowed_by(url, p) for p in allowed):
                parent = url.rsplit("/", 1)[0]
                known = ", ".join(allowed) if allowed else "none"
                raise InvalidInputError(
                    f"virtual source {url} is outside every allowed prefix (allowed: {known}); "
                    f"allow it with repo.add_virtual_source({parent!r}) or "
                    f"`zarrlake virtual sources add {parent}`"
                )
