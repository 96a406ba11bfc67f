"""Content hashes: the algorithm a repository names its objects and checks its chunks by.

A repository records its algorithm in its config when it is created and never changes it.
Repositories made before the choice existed use SHA-256; new ones use BLAKE3, which hashes
several times faster and can spread one large chunk over every core.
"""

from __future__ import annotations

from enum import IntEnum

import blake3

from zarrlake.errors import InvalidInputError

DIGEST_LENGTH = 32
"""Bytes of every digest (both algorithms give 256 bits)."""

_THREADED_BYTES = 1 << 20
"""BLAKE3 inputs at least this large are hashed on several threads."""


class Hash(IntEnum):
    """The content-hash algorithms a repository can name its objects by (value stored in frames)."""

    SHA256 = 1
    BLAKE3 = 2

    @property
    def label(self) -> str:
        """The name used in configs and on the command line ("sha256", "blake3")."""
        return self.name.lower()


DEFAULT = Hash.BLAKE3
"""The algorithm of new repositories."""
LEGACY = Hash.SHA256
"""The algorithm of repositories whose config names none."""


def digest(algo: Hash, data: bytes | memoryview, *, spread: bool = True) -> bytes:
    """The 32-byte digest of `data`; large BLAKE3 inputs are hashed on several threads unless
    `spread` is False (a caller hashing on many threads of its own: handing each input to
    BLAKE3's pool only adds wake-ups). Either way the hash runs without the GIL."""
    if algo is Hash.BLAKE3:
        threads = blake3.blake3.AUTO if spread and len(data) >= _THREADED_BYTES else 1
        return blake3.blake3(data, max_threads=threads).digest()
    import hashlib  # (imported by the repositories that use it: opening needs no OpenSSL)

    return hashlib.sha256(data).digest()


def parse(name: str | Hash) -> Hash:
    """The algorithm named `name` ("blake3" or "sha256")."""
    if isinstance(name, Hash):
        return name
    try:
        return Hash[str(name).upper()]
    except KeyError:
        choices = ", ".join(h.label for h in Hash)
        raise InvalidInputError(
            f"unknown content hash {name!r} (choose one of {choices})"
        ) from None
