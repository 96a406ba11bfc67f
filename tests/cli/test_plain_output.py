"""What the CLI prints without rich (cli/plain.py) is what rich prints, and what it converts
without pydantic (cli/coerce.py) is what typer's pydantic conversion gives: checked against
rich and typer themselves, over many inputs."""

from __future__ import annotations

import contextlib
import io
import random

import pytest
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from zarrlake.cli import build_command, coerce, plain

ALPHABET = "abc XYZ 019:-_.,/()[]\\\té漢😀"
WORDS = ["", "a", "main", ":smile:", "12:30:05", "x" * 70, "[bold]no[/]", " padded ", "tab\there"]


def rich_table(header: list[str], rows: list[list[str]]) -> str:
    """The table as the CLI's console draws it off a terminal (cli/context.py)."""
    console = Console(file=io.StringIO(), highlight=False, soft_wrap=True, width=120)
    table = Table(box=None, header_style="bold")
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*map(escape, row))
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def rich_line(text: str) -> str:
    console = Console(file=io.StringIO(), highlight=False, soft_wrap=True, width=120)
    console.print(f"[dim]{escape(text)}[/]")
    return console.file.getvalue()  # type: ignore[attr-defined]


def printed(call, *args) -> tuple[bool, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        done = call(*args)
    return done, out.getvalue()


def cases(n: int):
    rng = random.Random(50)
    for _ in range(n):
        columns = rng.randint(1, 5)
        header = [
            rng.choice(["commit", "time", "author", "path", "message"]) for _ in range(columns)
        ]

        def word() -> str:
            if rng.random() < 0.3:
                return rng.choice(WORDS)
            letters = ALPHABET if rng.random() < 0.4 else "abcdef 12:-"
            return "".join(rng.choice(letters) for _ in range(rng.choice([0, 1, 4, 9, 25, 50])))

        yield header, [[word() for _ in range(columns)] for _ in range(rng.randint(0, 4))]


def test_a_table_printed_plainly_is_the_table_rich_prints(monkeypatch):
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    plainly = 0
    for header, rows in cases(1500):
        done, out = printed(plain.print_table, header, rows)
        if done:
            plainly += 1
            assert out == rich_table(header, rows), (header, rows)
        else:
            assert out == ""
        line = rows[0][0] if rows else header[0]
        done, out = printed(plain.print_line, line)
        assert out == (rich_line(line) if done else "")
    assert plainly > 300  # the plain path was taken, and matched, many times


@pytest.mark.parametrize(
    ("cells", "env"),
    [
        (["x" * 60, "y" * 60], {}),  # too wide: rich wraps it
        (["caf\u00e9"], {}),  # not ASCII: rich measures cells
        (["I :thumbs_up: it"], {}),  # an emoji code
        (["[red]x"], {}),  # markup
        (["ok"], {"FORCE_COLOR": "1"}),  # a terminal, as rich is told
        (["ok"], {"TTY_COMPATIBLE": "1"}),
    ],
)
def test_what_rich_prints_otherwise_is_left_to_rich(monkeypatch, cells, env):
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert printed(plain.print_table, [f"c{i}" for i in range(len(cells))], [cells]) == (False, "")


def _parameters():
    """Every option and argument of every command, with the command's name."""
    seen = []

    def walk(command, path):
        for param in command.params:
            if getattr(param, "type_descriptor", None) is not None:
                seen.append((f"{path} {param.name}", param))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(build_command(None), "zarrlake")
    return seen


VALUES = ["main", "", " 7", "7", "0", "-3", "007", "12345678901234567890", "1.5", "abc", "2h"]
VALUES += ["2024-05-01", "9,1,2", ":,0", "true"]


def test_plain_values_convert_as_typer_converts_them():
    from pydantic import ValidationError
    from typer._coercion import build_runtime_param

    checked = 0
    for where, param in _parameters():
        described = param.type_descriptor
        for value in [*VALUES, True, 3, ("a", "b"), ()]:
            mine = coerce.plain_value(described.annotation, described.parameter_info, value)
            if mine is coerce.UNSURE:
                continue
            typers = build_runtime_param(described)
            try:
                theirs = typers._coerce_value(value, param=param, ctx=None)
            except (ValidationError, ValueError) as e:
                pytest.fail(f"{where}: {value!r} converted to {mine!r}; typer refuses it: {e}")
            assert (type(mine), mine) == (type(theirs), theirs), (where, value)
            checked += 1
    assert checked > 200
