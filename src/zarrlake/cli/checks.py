"""Checks: declare, list, run and remove the rules that gate what lands on a branch."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import typer

from zarrlake.cli.context import PANEL_REFS, console, escape, options, print_json, usage_error

check_app = typer.Typer(
    help="Declare, list, run and remove checks: rules every commit, merge, revert or reset "
    "onto the branches they guard must pass.\n\n"
    "Example: zarrlake -r ./myrepo check add t-range --kind value-range --array t "
    "--min -90 --max 60 --branch main",
    no_args_is_help=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]

Kind = Literal[
    "max-nan-fraction",
    "value-range",
    "monotonic",
    "required-attrs",
    "schema-unchanged",
    "max-changed-chunks",
    "no-deleted-chunks",
    "custom",
]
"""The kinds `check add --kind` takes (a choice: anything else is a usage error)."""
FIELDS: dict[Kind, set[str]] = {
    "max-nan-fraction": {"array", "fraction"},
    "value-range": {"array", "min", "max"},
    "monotonic": {"coord", "step"},
    "required-attrs": {"array", "names"},
    "schema-unchanged": {"array", "append_dims"},
    "max-changed-chunks": {"n"},
    "no-deleted-chunks": set(),
    "custom": {"entry_point"},
}
"""The flags each kind takes (by field name); --json-params gives any field instead."""
FLAG = {"names": "--attr", "append_dims": "--append-dim", "entry_point": "--entry-point"}


def build(kind: Kind, flags: dict[str, Any], json_params: str | None) -> Any:
    """The check `kind` with the given flags and JSON parameters; a usage error naming a
    flag the kind does not take, or malformed JSON (the check's own validation refuses bad
    values with InvalidInputError)."""
    from zarrlake.vc.checks.kinds import check_from_json

    given = {k: v for k, v in flags.items() if v not in (None, [], ())}
    wrong = sorted(set(given) - FIELDS[kind])
    if wrong:
        shown = ", ".join(FLAG.get(w, f"--{w}") for w in wrong)
        raise usage_error(f"kind {kind!r} does not take {shown}")
    params: dict[str, Any] = {}
    if json_params is not None:
        try:
            params = json.loads(json_params)
        except ValueError as e:
            raise usage_error(f"--json-params is not valid JSON: {e}") from None
        if not isinstance(params, dict):
            raise usage_error("--json-params must be a JSON object")
    if kind == "custom":
        if "entry_point" not in given:
            raise usage_error("kind 'custom' needs --entry-point NAME")
        return check_from_json(
            {"kind": kind, "entry_point": given["entry_point"], "params": params}
        )
    if "append_dims" in given:
        given["append_dims"] = [int(d) if d.isdigit() else d for d in given["append_dims"]]
    return check_from_json({"kind": kind, **params, **given})


def rule_json(rule: Any) -> dict:
    """A check rule as printed by --json."""
    return rule.to_json()


@check_app.command("add")
def check_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The check's name (letters, digits, - _ .).")],
    kind: Annotated[Kind, typer.Option("--kind", help="What it checks.", show_default=False)],
    branch: Annotated[
        list[str] | None,
        typer.Option("--branch", help="A branch name or glob it guards (repeat; default main)."),
    ] = None,
    array: Annotated[str | None, typer.Option(help="The array it reads.")] = None,
    coord: Annotated[str | None, typer.Option(help="The 1-D coordinate (monotonic).")] = None,
    min_: Annotated[float | None, typer.Option("--min", help="Lowest value allowed.")] = None,
    max_: Annotated[float | None, typer.Option("--max", help="Highest value allowed.")] = None,
    fraction: Annotated[
        float | None, typer.Option(help="Highest NaN/fill fraction of a chunk.")
    ] = None,
    step: Annotated[float | None, typer.Option(help="The coordinate's exact step.")] = None,
    attr: Annotated[
        list[str] | None, typer.Option("--attr", help="A required attribute (repeat).")
    ] = None,
    append_dim: Annotated[
        list[str] | None,
        typer.Option("--append-dim", help="A dimension (name or index) that may grow (repeat)."),
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="Most chunks a change may touch.")] = None,
    entry_point: Annotated[
        str | None, typer.Option(help="The custom check's entry point (group zarrlake.checks).")
    ] = None,
    json_params: Annotated[
        str | None,
        typer.Option("--json-params", help="Parameters as a JSON object (custom: its keywords)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Declare check NAME guarding the branches given (default main).

    Example: zarrlake -r ./myrepo check add t-range --kind value-range --array t --min 0
    --max 50 --branch main
    """
    flags = {
        "array": array,
        "coord": coord,
        "min": min_,
        "max": max_,
        "fraction": fraction,
        "step": step,
        "names": attr,
        "append_dims": append_dim,
        "n": n,
        "entry_point": entry_point,
    }
    check = build(kind, flags, json_params)
    rule = options(ctx).open().add_check(name, check, branches=tuple(branch or ("main",)))
    if json_out:
        print_json(rule_json(rule))
    else:
        console.print(
            f"Added check [bold]{escape(name)}[/] ({kind}) on {escape(', '.join(rule.branches))}"
        )


@check_app.command("list")
def check_list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the declared checks.

    Example: zarrlake -r ./myrepo check list --json
    """
    rules = options(ctx).open().list_checks()
    if json_out:
        print_json([rule_json(r) for r in rules])
        return
    if not rules:
        console.print("(no checks)")
        return
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold")
    for col in ("name", "kind", "branches", "parameters"):
        table.add_column(col)
    for r in rules:
        params = {k: v for k, v in r.check.to_json().items() if k != "kind"}
        table.add_row(
            escape(r.name), r.check.kind, escape(", ".join(r.branches)), escape(json.dumps(params))
        )
    console.print(table)


@check_app.command("remove")
def check_remove(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The check's name.")],
    json_out: JsonOpt = False,
) -> None:
    """Remove check NAME.

    Example: zarrlake -r ./myrepo check remove t-range
    """
    options(ctx).open().remove_check(name)
    if json_out:
        print_json({"removed": name})
    else:
        console.print(f"Removed check [bold]{escape(name)}[/]")


@check_app.command("run")
def check_run(
    ctx: typer.Context,
    ref: Annotated[
        str, typer.Argument(metavar="REF", help="The commit to check (branch, tag, id).")
    ] = "main",
    base: Annotated[
        str | None, typer.Option(help="Check the change from this ref (default: REF's parent).")
    ] = None,
    name: Annotated[
        list[str] | None, typer.Option("--name", help="Run only this check (repeat).")
    ] = None,
    again: Annotated[
        bool, typer.Option("--again", help="Compute again instead of reusing recorded results.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Run every check (or those named), whatever branches they guard, on the change from
    BASE to REF; exit code 1 if one fails.

    Example: zarrlake -r ./myrepo check run day-2024-01-01 --base main
    """
    results = options(ctx).open().run_checks(ref, base=base, names=name, reuse=not again)
    if json_out:
        print_json([r.to_json() for r in results])
    elif not results:
        console.print("(no checks)")
    else:
        from rich.table import Table

        table = Table(box=None, show_header=True, header_style="bold")
        for col in ("check", "kind", "result", "message", "chunks"):
            table.add_column(col)
        for r in results:
            state = "[green]passed[/]" if r.passed else "[red]FAILED[/]"
            table.add_row(escape(r.name), r.kind, state, escape(r.message), _chunks(r))
        console.print(table)
    if any(not r.passed for r in results):
        raise typer.Exit(1)


def _chunks(result: Any) -> str:
    """How a result was reached: chunks decided from statistics and chunks read."""
    if result.reused:
        return "recorded"
    return f"{result.chunks_from_stats} from statistics, {result.chunks_read} read"


def register(app: typer.Typer) -> None:
    """Add the `check` command group to the command line."""
    app.add_typer(check_app, name="check", rich_help_panel=PANEL_REFS)
