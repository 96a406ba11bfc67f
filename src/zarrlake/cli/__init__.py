"""The `zarrlake` command: git-like verbs on a repository.

Global options (-r/--repo, --metastore, storage options, --debug) may be given before or
after the command name. Errors print one line on stderr: exit 2 for a usage error (the
command line does not parse), 1 for an operation refused or failed (a zarrlake error or the
operating system's) and for an internal error (any other exception: a bug, said so, with
the hint to rerun with --debug); --debug (or ZARRLAKE_DEBUG=1) shows the traceback
instead. The command tree and its running are in `tree.py`, loaded by `main` (its names,
`app` and `build_command` among them, are reachable from here too).
"""

from __future__ import annotations

import gc
import importlib


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the command and turns errors into one line.

    Garbage collection is paused while the command line loads (typer, the command's
    module, its command built): that makes tens of thousands of objects that live as long
    as the process and no garbage, and collecting during it took about 40 collections
    (~5 ms) of a quick command's start. When the process runs this one command (`argv`
    None), what loading made is frozen too (`gc.freeze`): later collections skip it."""
    from zarrlake._util.lazy import paused_collection  # (loaded with the package)

    with paused_collection():  # the package's own loads share the pause
        try:
            from zarrlake.cli import tree

            command, args, debug = tree.prepare(argv)
        finally:
            if argv is None:
                gc.freeze()
    tree.run(command, args, debug)


def __getattr__(name: str) -> object:
    """The command tree's names (`app`, `build_command`, ...; see tree.py), loaded on
    first use."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("zarrlake.cli.tree"), name)


__all__ = ["app", "build_command", "main"]
