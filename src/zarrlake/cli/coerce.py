"""Option and argument values converted without pydantic where the answer is plain.

typer (from 0.2x) converts every value through a pydantic TypeAdapter, made at the value's
first use, and importing pydantic took longer than running a quick command (`zarrlake log`).
Strings, booleans, whole numbers in range, lists of strings and values a parser accepts are
converted here exactly as typer's adapters convert them; anything else (a bad value, a
number written otherwise, a choice, a path, a file) goes to typer's own conversion, so
values and error messages stay typer's.
"""

from __future__ import annotations

import re
from typing import Any, get_args, get_origin

UNSURE: Any = object()
"""`plain_value`'s answer when typer's own conversion must decide."""
_WHOLE = re.compile(r"0|-?[1-9][0-9]{0,17}")
"""Whole numbers written the one way every integer parser reads alike."""


def plain_value(annotation: Any, info: Any, value: Any) -> Any:
    """`value` converted to `annotation` (typer's parameter info `info` says how), or
    UNSURE where typer's own conversion must decide (it may refuse the value)."""
    if getattr(info, "click_type", None) is not None:
        return UNSURE
    if get_origin(annotation) is list:
        plain = info.parser is None and get_args(annotation) == (str,)
        if plain and isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return list(value)
        return UNSURE
    if info.parser is not None:
        try:
            return info.parser(value)
        except Exception:  # typer's conversion calls it again and says why, as typer does
            return UNSURE
    if annotation is str and type(value) is str:
        return value
    if annotation is bool and type(value) is bool:
        return value
    if annotation is int and not info.clamp:
        if type(value) is str and _WHOLE.fullmatch(value):
            number = int(value)
        elif type(value) is int:
            number = value
        else:
            return UNSURE
        below = info.min is not None and number < info.min
        above = info.max is not None and number > info.max
        return UNSURE if below or above else number
    return UNSURE


def convert_plainly(param: Any) -> None:
    """Make `param` convert plain values here, and others through typer's own conversion,
    built when first needed."""
    described = getattr(param, "type_descriptor", None)
    if _PLAIN is not None and described is not None and described.file_annotation is None:
        param._runtime_param = _PLAIN(described.parameter_info, described.annotation)


_PLAIN: Any = None
"""typer's conversion done here for plain values (None for a typer without pydantic)."""

try:
    from typer._coercion import RuntimeParam, build_runtime_param
except ImportError:  # a typer that converts values without pydantic: nothing to do
    pass
else:

    class _Plain(RuntimeParam):
        """typer's conversion of one parameter, done here where the value is plain."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            plain = plain_value(self.annotation, self.parameter_info, value)
            if plain is not UNSURE:
                return plain
            param._runtime_param = typer_own = build_runtime_param(param.type_descriptor)
            return typer_own._coerce_value(value, param=param, ctx=ctx)

    _PLAIN = _Plain
