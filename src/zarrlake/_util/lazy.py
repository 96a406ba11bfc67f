"""Modules loaded on first use, with garbage collection paused while they load.

`lazy_exports` makes a module `__getattr__` (PEP 562) that imports the defining module at a
name's first use: `import zarrlake` and `Repo.open` then load only what opening needs; the
rest (diffs, checks, Spark, ...) loads when used. `load` is the import every such first use
goes through: loading modules makes thousands of objects (functions, code, dicts, classes)
that live as long as the process and are never garbage, and collecting while they are made
only moves them into older generations, while it brings a new process's first full
collection (CPython runs one once generation 1 has overflowed ten times) into its first
reads. Paused, a load costs about one young collection instead of tens."""

from __future__ import annotations

import _thread
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType

_lock = _thread.allocate_lock()
_depth = 0
"""Loads in progress (in any thread): collection resumes when the last ends."""
_resume = False
"""Whether collection was on when the first of them began (a user's `gc.disable()` stays)."""


@contextmanager
def paused_collection() -> Iterator[None]:
    """Garbage collection off for the block (nested and concurrent blocks share one pause),
    then back to what it was: on only if it was on when the outermost block began."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            if _depth:  # (0: a forked child ended the pause already)
                _depth -= 1
                if _depth == 0 and _resume:
                    gc.enable()


def _end_in_child() -> None:
    """In a child forked during a load, the loading thread may not exist: the pause ends
    there (collection back as it was before the load), with a lock of the child's own."""
    global _lock, _depth
    _lock = _thread.allocate_lock()
    if _depth:
        _depth = 0
        if _resume:
            gc.enable()


os.register_at_fork(after_in_child=_end_in_child)


def load(module: str) -> ModuleType:
    """`importlib.import_module(module)` with collection paused while it loads (one that
    another thread is loading is waited for, as `import_module` does)."""
    with paused_collection():
        return importlib.import_module(module)


def lazy_exports(
    module: str, names: Mapping[str, str], submodules: Iterable[str] = ()
) -> Callable[[str], object]:
    """A `__getattr__` for `module`: each of `names` (name -> the module defining it) is
    imported at its first use (`load`) and kept in `module`, as are the `submodules` by
    name."""
    subs = frozenset(submodules)

    def __getattr__(name: str) -> object:
        where = names.get(name)
        if where is not None:
            value = getattr(load(where), name)
            setattr(sys.modules[module], name, value)
            return value
        if name in subs:
            return load(f"{module}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
