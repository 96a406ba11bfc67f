"""The command tree of `zarrlake` and running one command line through it (`zarrlake.cli`
loads this module from `main`, and forwards its names).

Modules here import only typer at the top; rich loads when a command draws, the engine
(zarr, numpy, backends) when a command needs it, and only the command run is imported and
built (`build_command`, `COMMANDS`). This module's annotations are evaluated once, as it
loads (no `from __future__ import annotations`): typer reads the root's signature several
times while it builds a command, and evaluated string annotations (each typer.Option) each
time.
"""

import copy
import importlib
import os
import sys
from functools import cache
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from zarrlake.cli.coerce import convert_plainly
from zarrlake.cli.context import PANELS, Options, env_flag, error_line, parse_storage_option
from zarrlake.cli.redact import install_logging, is_secret_option, redact

HELP_NAMES = ["-h", "--help"]


class _InPanels(typer.core.TyperGroup):
    """Lists commands and groups alike in the order of their help panels (`PANELS`), which
    is the order `--help` shows the panels in, leaving out hidden aliases (they still run)."""

    def list_commands(self, ctx: Any) -> list[str]:
        def panel(name: str) -> int:
            return PANELS.index(getattr(self.commands[name], "rich_help_panel", None) or PANELS[-1])

        shown = [name for name in super().list_commands(ctx) if not self.commands[name].hidden]
        return sorted(shown, key=panel)


_root = typer.Typer(
    cls=_InPanels,
    name="zarrlake",
    help=(
        "zarrlake: a transactional, version-controlled database for Zarr v3 arrays.\n\n"
        "Example: zarrlake -r ./myrepo log --limit 5"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": HELP_NAMES},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"zarrlake {version('zarrlake')}\n")
        raise typer.Exit()


@_root.callback()
def _global(
    ctx: typer.Context,
    repo: Annotated[
        str,
        typer.Option(
            "-r", "--repo", envvar="ZARRLAKE_REPO", help="Repository: a path or s3://bucket/prefix."
        ),
    ] = ".",
    metastore: Annotated[
        str | None,
        typer.Option(
            envvar="ZARRLAKE_METASTORE",
            help="Metastore URL (postgresql://..., sqlite:///path); default: SQLite in the repo.",
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option(envvar="ZARRLAKE_ENDPOINT_URL", help="S3 endpoint URL.")
    ] = None,
    region: Annotated[str | None, typer.Option(envvar="ZARRLAKE_REGION", help="S3 region.")] = None,
    access_key_id: Annotated[
        str | None, typer.Option(envvar="ZARRLAKE_ACCESS_KEY_ID", help="S3 access key id.")
    ] = None,
    secret_access_key: Annotated[
        str | None,
        typer.Option(envvar="ZARRLAKE_SECRET_ACCESS_KEY", help="S3 secret access key."),
    ] = None,
    allow_http: Annotated[
        bool,
        typer.Option(
            "--allow-http", envvar="ZARRLAKE_ALLOW_HTTP", help="Allow plain-HTTP S3 endpoints."
        ),
    ] = False,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(help="Any other storage option as KEY=VALUE (repeatable)."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    opts: dict = {}
    # S3 settings exported in the environment are for S3 repositories: a local one ignores
    # them (given on the command line, they are checked against the location as before).
    local = "://" not in repo or repo.startswith("file://")
    for key, value in (
        ("endpoint_url", endpoint_url),
        ("region", region),
        ("access_key_id", access_key_id),
        ("secret_access_key", secret_access_key),
        ("allow_http", allow_http or None),
    ):
        if value and not (local and _from_environment(ctx, key)):
            opts[key] = value
    opts.update(parse_storage_option(o) for o in storage_option or [])
    redact.add(v for k, v in opts.items() if is_secret_option(k))
    ctx.obj = Options(repo=repo, metastore=metastore, storage_options=opts, debug=debug)


COMMANDS = {
    "admin": ("init", "fsck", "demo"),
    "history": (
        "log",
        "show",
        "diff",
        "merge",
        "merge-base",
        "revert",
        "reset",
        "squash",
        "blame",
    ),
    "branches": ("branch", "tag"),
    "data": ("ls", "cat", "mv"),
    "sessions": ("sessions",),
    "lifecycle": ("gc", "expire"),
    "metastore": ("metastore",),
    "ui": ("ui",),
    "virtual": ("virtual", "import-virtual", "materialize"),
    "stats": ("stats",),
    "checks": ("check",),
    "pulls": ("pr",),
    "copies": ("clone", "pull", "export"),
    "purge": ("purge",),
}
"""The modules of `zarrlake.cli` adding commands, in the order they add them (the order of
the commands within a help panel), and the top-level commands and groups each adds: a
command line imports only the module of the command it runs."""
_MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}


@cache
def _registered(module: str) -> typer.Typer:
    """A Typer holding what `zarrlake.cli.<module>` registers (imported and registered once
    per process)."""
    holder = typer.Typer()
    importlib.import_module(f"zarrlake.cli.{module}").register(holder)
    return holder


def _with(modules: list[str], name: str | None = None) -> typer.Typer:
    """The root command with the commands and groups of `modules` (only `name`, if given)."""
    tree = copy.copy(_root)
    tree.registered_commands = []
    tree.registered_groups = []
    for module in modules:
        holder = _registered(module)
        tree.registered_commands += [
            c for c in holder.registered_commands if name is None or _name(c) == name
        ]
        tree.registered_groups += [
            g for g in holder.registered_groups if name is None or g.name == name
        ]
    return tree


def _name(command: Any) -> str:
    return command.name or typer.main.get_command_name(command.callback.__name__)


@cache
def _everything() -> typer.Typer:
    return _with(list(COMMANDS))


def __getattr__(name: str) -> object:
    """`app`, the whole command line (as typer's tools and the docs read it), is made on
    first use: a command line builds only its own command (`build_command`)."""
    if name == "app":
        return _everything()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_GLOBAL_VALUED = {
    "-r",
    "--repo",
    "--metastore",
    "--endpoint-url",
    "--region",
    "--access-key-id",
    "--secret-access-key",
    "--storage-option",
}
_GLOBAL_FLAGS = {"--debug", "--allow-http", "--version"}


def _from_environment(ctx: typer.Context, name: str) -> bool:
    """Whether option `name` took its value from its environment variable (typer ships its
    own copy of click, so the source is compared by name)."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "ENVIRONMENT"


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options found after the command name to the front, so that
    `zarrlake log -r repo` works like `zarrlake -r repo log`."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_FLAGS:
            front.append(arg)
        elif name in _GLOBAL_VALUED:
            front.append(arg)
            if "=" not in arg and i + 1 < len(argv):
                i += 1
                front.append(argv[i])
        else:
            rest.append(arg)
        i += 1
    return front + rest


_SECRET_ENV = ("ZARRLAKE_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _fail(message: str, code: int = 1) -> None:
    sys.stderr.write(redact(f"zarrlake: error: {message}") + "\n")
    sys.stderr.flush()
    sys.exit(code)


def _prepare(command: Any) -> None:
    """Boolean flags show in --help as `--debug`, not `--debug <bool>`; plain values are
    converted without pydantic (`coerce.py`)."""
    names = SimpleNamespace(help_option_names=HELP_NAMES)
    help_option = command.get_help_option(names)  # made once per command, then reused
    for param in [*command.params, *([help_option] if help_option else [])]:
        if param.param_type_name == "option" and getattr(param, "is_flag", False):
            param.metavar = ""
        convert_plainly(param)
    for sub in getattr(command, "commands", {}).values():
        _prepare(sub)


def _command_name(args: list[str]) -> str | None:
    """The command or group that `args` (global options first) run; None when they name
    none (`--help`, `--version`, no arguments)."""
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_FLAGS:
            i += 1
        elif name in _GLOBAL_VALUED:
            i += 1 if "=" in arg else 2
        else:
            return None if arg.startswith("-") else arg
    return None


ROOT_ONLY = ""
"""`build_command`'s name for the root's own options and no command (`zarrlake --version`)."""


def _only(name: str | None) -> typer.Typer:
    """The root with the one top-level command or group `name`, or none for `ROOT_ONLY`
    (everything when `name` names none of them): typer builds a command's parameters from
    its signature, and building all sixty took longer than running a quick command; only
    the module adding it is imported."""
    if name == ROOT_ONLY:
        return _with([])
    module = _MODULE_OF.get(name or "")
    if module is None:
        return _everything()
    return _with([module], name)


def _tree_for(args: list[str]) -> str | None:
    """What of the command tree `args` (global options first) need: the command they run,
    `ROOT_ONLY` for `--version` alone, or all of it (None) where the root's help may show."""
    name = _command_name(args)
    if name is None and "--version" in args and not any(a in HELP_NAMES for a in args):
        return ROOT_ONLY
    return name


@cache
def build_command(name: str | None = None) -> Any:
    """The click command tree of `app`, as the console script runs it: only the command or
    group `name` under the root when it is one (see `_only`), else all of it. Made once per
    process (a click command runs any number of times)."""
    command = typer.main.get_command(_only(name))
    _prepare(command)
    return command


def prepare(argv: list[str] | None) -> tuple[Any, list[str], bool]:
    """The command `argv` (None: the process's own) runs, its arguments (global options
    first) and whether --debug asks for tracebacks; registers the secrets to mask and
    installs logging."""
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args or env_flag("ZARRLAKE_DEBUG")
    redact.forget()  # an earlier run in this process registered its own secrets
    redact.add(os.environ[k] for k in _SECRET_ENV if os.environ.get(k))
    install_logging()
    return build_command(_tree_for(args)), args, debug


def run(command: Any, args: list[str], debug: bool) -> None:
    """Run `command` (from `prepare`) and turn errors into one line on stderr."""
    try:
        code = command.main(args, prog_name="zarrlake", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.TyperException as e:  # usage errors: unknown option, missing argument
        if debug:
            raise
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else "zarrlake"
        _fail(f"{e.format_message()} (see '{where} --help')", e.exit_code)
    except typer.Abort:
        _fail("aborted", 1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as e:
        if debug:
            raise
        _fail(error_line(e))
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["build_command", "prepare", "run"]
