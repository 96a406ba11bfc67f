"""The installed `zarrlake` console script run as a subprocess (a clean ZARRLAKE_*
environment), for the tests that need a real process: start-up, imports, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ZARRLAKE = str(Path(sys.executable).with_name("zarrlake"))

PROBE = """
import sys
from zarrlake.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(sys.modules), file=sys.stderr)
"""
"""`python -c PROBE ARGS...`: the console script's entry point, then the modules it imported
(sorted, on stderr)."""


def run(
    *args: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZARRLAKE_")}
    full_env = {**clean, **(env or {})}
    return subprocess.run(
        [ZARRLAKE, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


def ok(*args: str, **kw) -> subprocess.CompletedProcess:
    res = run(*args, **kw)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stderr}"
    return res


def fails(*args: str, code: int = 1, **kw) -> str:
    """Run a command that must fail; return its single stderr line."""
    res = run(*args, **kw)
    assert res.returncode == code, f"{args}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("zarrlake: error: ")
    return lines[0]
