"""Old names and call forms kept for one release: each warns (DeprecationWarning, pointing at
the caller's line) and then works as the new form does. Type checkers see only the new form,
so they flag the old one while it still runs.

- `renamed_arguments(into="target")`: a keyword argument's old name;
- `keyword_only("at")`: options that used to be positional, in their old order;
- `deprecated_alias("new")`: a method or property's old name.
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn(message: str) -> None:
    """Warn that an old form was used: `message` says what to write instead. The warning
    points at the first caller outside zarrlake (the user's line), however deep the old
    form was reached."""
    warnings.warn(message, DeprecationWarning, stacklevel=2, skip_file_prefixes=(_PACKAGE,))


def _name(fn: Callable[..., Any]) -> str:
    return fn.__qualname__.removeprefix("_")


def renamed_arguments(**old_to_new: str) -> Callable[[F], F]:
    """Accept each old keyword name for its new one, with a warning."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{_name(fn)}() got both {old}= and {new}=; give {new}=")
                    kwargs[new] = kwargs.pop(old)
                    warn(f"{_name(fn)}({old}=...) is deprecated: write {new}=...")
            return fn(*args, **kwargs)

        return cast(F, inner)

    return wrap


def keyword_only(*old_order: str) -> Callable[[F], F]:
    """Accept, with a warning, the options `old_order` given by position after the
    function's positional parameters, as its old signature took them."""

    def wrap(fn: F) -> F:
        # its positional parameters, read off its code: `inspect.signature` took ~0.5 ms of
        # `import zarrlake.repo` (eleven methods)
        positional = inspect.unwrap(fn).__code__.co_argcount

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if len(args) > positional:
                extra = args[positional:]
                if len(extra) > len(old_order):
                    raise TypeError(
                        f"{_name(fn)}() takes at most {positional + len(old_order)} positional "
                        f"arguments ({len(args)} given)"
                    )
                names = old_order[: len(extra)]
                for name, value in zip(names, extra, strict=True):
                    if name in kwargs:
                        raise TypeError(f"{_name(fn)}() got multiple values for {name!r}")
                    kwargs[name] = value
                shown = ", ".join(f"{n}=..." for n in names)
                warn(
                    f"passing {', '.join(names)} to {_name(fn)}() by position is deprecated: "
                    f"write {shown}"
                )
                args = args[:positional]
            return fn(*args, **kwargs)

        return cast(F, inner)

    return wrap


class deprecated_alias:
    """A class attribute that is an old name of attribute `new` (a method or a property):
    reading it warns and gives the new one."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        where = (owner or type(obj)).__name__
        warn(f"{where}.{self.old} is deprecated: use {where}.{self.new}")
        return getattr(owner if obj is None else obj, self.new)
