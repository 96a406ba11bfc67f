"""Backends by URL scheme, after lakeFS's ``kv.Register``: each driver module registers its
factory when imported, and a lookup imports a built-in driver module only when its scheme is
first used, so opening the embedded default never loads the others (psycopg, S3 clients).

Hooks registered with `add_hook` see every store a registry opens (the raw backend, before
any retrying wrapper) and may return a wrapper; tests use this to inject faults from outside
the production open path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from zarrlake._util.lazy import load
from zarrlake.errors import InvalidInputError


class Registry[F, S]:
    """Factories of one kind of backend (`F`, returning stores `S`), keyed by URL scheme."""

    def __init__(self, kind: str, builtin: dict[str, str], entry_point_group: str) -> None:
        self.kind = kind
        self._builtin = dict(builtin)  # scheme -> module that registers it when imported
        self._group = entry_point_group
        self._factories: dict[str, F] = {}
        self._hooks: list[Callable[[S], S]] = []
        self._lock = threading.Lock()

    def register(self, scheme: str, factory: F) -> None:
        """Make `factory` open URLs of `scheme` (case-insensitive); replaces an earlier one."""
        with self._lock:
            self._factories[scheme.lower()] = factory

    def schemes(self) -> list[str]:
        """Every scheme known now or loadable on first use."""
        return sorted(set(self._factories) | set(self._builtin))

    def factory(self, scheme: str, url: str) -> F:
        """The factory of `scheme`, importing its driver on first use; InvalidInputError if
        no driver handles it (the message names the URL and the known schemes)."""
        scheme = scheme.lower()
        found = self._factories.get(scheme)
        if found is not None:
            return found
        module = self._builtin.get(scheme)
        if module is not None:
            load(module)  # registers itself (collection paused: _util/lazy.py)
        else:
            from importlib.metadata import entry_points  # slow to import: only on a miss

            for point in entry_points(group=self._group, name=scheme):
                self.register(scheme, point.load())
        found = self._factories.get(scheme)
        if found is None:
            known = ", ".join(f"{s}://" for s in self.schemes())
            raise InvalidInputError(
                f"unknown {self.kind} scheme {scheme!r} in {url!r}: use {known}"
            )
        return found

    def add_hook(self, hook: Callable[[S], S]) -> None:
        """Pass every store opened from now on through `hook` (it returns the store to use)."""
        with self._lock:
            self._hooks.append(hook)

    def remove_hook(self, hook: Callable[[S], S]) -> None:
        """Stop applying `hook` to stores opened from now on."""
        with self._lock:
            self._hooks.remove(hook)

    def opened(self, store: S) -> S:
        """`store` after the hooks (called by the open function on each new raw store)."""
        for hook in list(self._hooks):
            store = hook(store)
        return store
