"""A light command starts light: `zarrlake --version` and `zarrlake sessions list --json`
leave out the modules they do not need (the engine's extras, rich where nothing is drawn,
typer's pydantic where no option value is parsed). The probe runs the console script's entry
point in a new process and prints what it imported: a test of modules, not of time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import zarrlake as zl
from tests.helpers.cli_process import PROBE
from tests.helpers.imports import NOT_FOR_OPENING, loaded

EXTRAS = {"zarr", "pyspark", "pyarrow", "pandas", "xarray", "dask", "psycopg", "starlette"}
"""What no command that reads a local repository's records needs."""


def imported(*args: str) -> tuple[str, set[str]]:
    """What `zarrlake ARGS` printed on stdout, and the top-level packages it imported."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    modules = ast.literal_eval(res.stderr.strip().splitlines()[-1])
    return res.stdout, {m.split(".")[0] for m in modules} | set(modules)


def test_version_imports_neither_the_engine_nor_rich_nor_pydantic():
    out, modules = imported("--version")
    assert out == f"zarrlake {zl.__version__}\n"  # the probe did run the command
    heavy = EXTRAS | {"numpy", "rich", "pydantic", "zarrlake.repo"}
    assert not heavy & modules, sorted(heavy & modules)


def test_sessions_list_json_imports_no_engine_extras_and_no_rich(tmp_path):
    zl.Repo.create(tmp_path / "r").close()
    out, modules = imported("-r", str(tmp_path / "r"), "sessions", "list", "--json")
    assert out == "[]\n"
    assert not (EXTRAS | {"rich"}) & modules, sorted((EXTRAS | {"rich"}) & modules)
    assert "zarrlake.repo" in modules  # the probe did open the repository


def test_a_command_builds_only_its_own_part_of_the_command_tree():
    """typer reads every command's signature to build it: a command builds its own."""
    from zarrlake.cli import _tree_for, build_command

    assert _tree_for(["-r", "x", "--debug", "sessions", "list", "--json"]) == "sessions"
    assert set(build_command("sessions").commands) == {"sessions"}
    assert set(build_command("sessions").commands["sessions"].commands) >= {"list", "show"}
    assert build_command(_tree_for(["--version"])).commands == {}
    everything = build_command(_tree_for(["--version", "--help"]))  # help lists them all
    assert {"sessions", "log", "import-virtual"} <= set(everything.commands)
    assert _tree_for(["--help"]) is None and _tree_for([]) is None
    assert _tree_for(["nosuch"]) == "nosuch"
    assert set(build_command("nosuch").commands) == set(everything.commands)  # its error


def test_log_imports_neither_pydantic_nor_rich_nor_other_commands(tmp_path):
    """`log` off a terminal: its values converted without pydantic (cli/coerce.py), its
    table printed without rich (cli/plain.py), only its own command module imported, and
    of the engine only what opening a local repository and reading its log need (as
    `import zarrlake` + `Repo.open`, tests/core/test_cheap_import.py)."""
    zl.Repo.create(tmp_path / "r").close()
    out, modules = imported("-r", str(tmp_path / "r"), "log", "--limit", "1")
    assert out.splitlines()[0].split() == ["commit", "time", "author", "message"]
    assert out.splitlines()[1].split()[-2:] == ["Repository", "initialized"]
    assert not {"pydantic", "rich"} & modules, sorted({"pydantic", "rich"} & modules)
    assert not loaded(modules, NOT_FOR_OPENING)
    commands = {m for m in modules if m.startswith("zarrlake.cli.")}
    shared = {"tree", "context", "redact", "coerce", "plain"}
    assert commands == {"zarrlake.cli.history"} | {f"zarrlake.cli.{m}" for m in shared}


def test_each_command_is_looked_up_in_the_module_that_adds_it():
    """`COMMANDS` names, in order, the modules that add commands and what each adds."""
    import typer

    from zarrlake.cli import COMMANDS, _registered

    for module, names in COMMANDS.items():
        added = _registered(module)
        found = [
            c.name or typer.main.get_command_name(c.callback.__name__)
            for c in added.registered_commands
        ]
        found += [g.name for g in added.registered_groups]
        assert sorted(found) == sorted(names), module
    cli = Path(zl.__file__).parent / "cli"
    adding = {p.stem for p in cli.glob("*.py") if "\ndef register(" in p.read_text()}
    assert adding == set(COMMANDS)


GC_PROBE = """
import gc, sys
runs = []
gc.callbacks.append(lambda phase, info: phase == "stop" and runs.append(info["generation"]))
import zarrlake
frozen = gc.get_freeze_count()
before = len(runs)
from zarrlake.cli import main
sys.argv = ["zarrlake", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(len(runs) - before, gc.isenabled(), gc.get_freeze_count() > frozen)
"""


def test_the_command_line_loads_without_collecting_garbage_and_leaves_collection_on(tmp_path):
    """`main` pauses garbage collection while typer, the command's module and its command
    load, then freezes what they made (the process runs one command) and turns collection
    back on. Counted after `import zarrlake`: `log` ran 27 collections, none finding
    garbage, before; now only the command's own run collects (8). A count, not a time."""
    zl.Repo.create(tmp_path / "r").close()
    res = subprocess.run(
        [sys.executable, "-c", GC_PROBE, "-r", str(tmp_path / "r"), "log", "--limit", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1].split()[-2:] == ["Repository", "initialized"]  # the command did run
    collections, enabled, frozen = lines[-1].split()
    assert enabled == "True" and frozen == "True"
    assert int(collections) <= 12, collections
