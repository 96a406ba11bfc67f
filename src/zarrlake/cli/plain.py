"""Output printed without rich where rich would print the text as it is: to a file or a pipe
(no colours, no terminal), text of printable ASCII that neither wraps nor holds markup or
emoji codes. Importing and drawing with rich took longer than a quick command's work
(`zarrlake log`); where these conditions do not hold the command draws with rich as before,
so the output is the same either way."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

WIDTH = 120
"""The width rich's console has when not printing to a terminal (cli/context.py)."""
_EMOJI = re.compile(r":(\S*?):")
"""rich's emoji codes (`:smile:`); times (`12:30:05`) hold only two-digit names, none a code."""


def to_plain_output() -> bool:
    """Whether rich would print without colours or terminal codes here: stdout is not a
    terminal, and neither TTY_COMPATIBLE nor FORCE_COLOR says to treat it as one (rich's
    own test, in its order)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "0"
    if os.environ.get("FORCE_COLOR") is not None:
        return os.environ["FORCE_COLOR"] == ""
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed: rich says not a terminal
        return True


def shows_as_is(text: str) -> bool:
    """Whether rich prints `text` (escaped of markup) as it is: printable ASCII only, no
    markup brackets or backslashes, no emoji code, no surrounding spaces."""
    if not text.isascii() or not text.isprintable() or "[" in text or "\\" in text:
        return False
    if text != text.strip(" "):
        return False
    return all(m.group(1).isdigit() and len(m.group(1)) == 2 for m in _EMOJI.finditer(text))


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
    """Print a table as rich's `Table(box=None)` prints it off a terminal (each cell padded
    by a space either side, columns as wide as their widest cell) and return True; or print
    nothing and return False where rich would print otherwise (see the module)."""
    if not to_plain_output() or not all(shows_as_is(c) for row in (header, *rows) for c in row):
        return False
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    if sum(w + 2 for w in widths) > WIDTH:
        return False  # rich wraps the widest columns
    for row in (header, *rows):
        sys.stdout.write("".join(f" {cell.ljust(w)} " for cell, w in zip(row, widths, strict=True)))
        sys.stdout.write("\n")
    sys.stdout.flush()
    return True


def print_line(text: str) -> bool:
    """Print `text` as rich's console prints it off a terminal (without wrapping) and return
    True; or print nothing and return False where rich would print otherwise."""
    if not to_plain_output() or not shows_as_is(text):
        return False
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return True
