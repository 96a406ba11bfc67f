"""The `zarrlake` command run in this process (typer's CliRunner isolation): the console
script's own entry point, so exit codes and one-line errors are as users see them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from zarrlake.cli import main


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        """The exit code, by subprocess's name (tests moved from tests/helpers/cli_process.py)."""
        return self.code

    def json(self) -> object:
        return json.loads(self.stdout)


def run(*args: str | Path) -> Result:
    """Run `zarrlake ARGS...` in-process; stdout is not a terminal (as in a pipe)."""
    with CliRunner().isolation() as (out, err, _):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        return Result(code, out.getvalue().decode(), err.getvalue().decode())


def ok(*args: str | Path) -> Result:
    res = run(*args)
    assert res.code == 0, f"{args}: exit {res.code}\n{res.stdout}\n{res.stderr}"
    return res


def fails(*args: str | Path, code: int = 1) -> str:
    """Run a command that must fail; return its one stderr line, without the prefix."""
    res = run(*args)
    assert res.code == code, f"{args}: exit {res.code}\n{res.stdout}\n{res.stderr}"
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zarrlake: error: "), res.stderr
    return lines[0].removeprefix("zarrlake: error: ")
