"""Names a module exports without importing their modules: a module `__getattr__` (PEP 562)
that imports the defining module at a name's first use. `import zarrlake` and `Repo.open`
then load only what opening needs; the rest (diffs, checks, Spark, ...) loads when used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    module: str, names: Mapping[str, str], submodules: Iterable[str] = ()
) -> Callable[[str], object]:
    """A `__getattr__` for `module`: each of `names` (name -> the module defining it) is
    imported at its first use and kept in `module`, as are the `submodules` by name."""
    subs = frozenset(submodules)

    def __getattr__(name: str) -> object:
        where = names.get(name)
        if where is not None:
            value = getattr(importlib.import_module(where), name)
            setattr(sys.modules[module], name, value)
            return value
        if name in subs:
            return importlib.import_module(f"{module}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
