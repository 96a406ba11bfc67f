"""Metastore commands: copy (move a repository to another metastore)."""

from __future__ import annotations

from typing import Annotated

import typer

from zarrlake.cli.context import PANEL_MAINTENANCE, console, options, print_json

app = typer.Typer(help="The repository's metastore.", no_args_is_help=True)


@app.command("copy")
def copy(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="Target: 'bucket' (the repository's own s3:// storage), postgresql://... "
            "or sqlite:///path.",
        ),
    ],
    no_switch: Annotated[
        bool,
        typer.Option("--no-switch", help="Copy and verify only; keep using the old metastore."),
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="The target holds an older copy of this repository (it used that metastore "
            "before): drop it and copy anew.",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Copy the repository's refs, sessions and gc records to another metastore, check the
    copy key by key, then make the repository use it (its config records the kind). No gc
    may run, nor a commit be under way. Open sessions are copied along: closed in the old
    metastore (workers still using it fail), open in the new one (join them by id). The old
    metastore keeps its copy, unused; copying back into it later needs --replace.

    Example: zarrlake -r s3://bucket/repo --metastore postgresql://db/zl metastore copy --to bucket
    """
    from zarrlake.cli.redact import redact

    repo = options(ctx).open()
    report = repo.copy_metastore(to, switch=not no_switch, replace=replace)
    if json_out:
        print_json(report.to_json())
        return
    console.print(
        f"copied {report.refs} ref(s), {report.sessions} session record(s), "
        f"{report.gc_records} gc record(s) and {report.staged_records} staged record(s) "
        f"from {report.source} to {redact(to)}; verified, in {report.seconds:.2f}s"
    )
    if report.replaced:
        console.print(f"the older copy of the repository in {redact(to)} was replaced")
    if report.switched:
        console.print(f"the repository now uses its {report.target} metastore")
    if report.moved_sessions:
        console.print(
            f"{len(report.moved_sessions)} open session(s) moved along: "
            f"{', '.join(report.moved_sessions)}; workers still writing through the old "
            "metastore fail there: reopen the repository and join the session by id"
        )
    else:
        console.print(f"the repository still uses its {report.source} metastore (--no-switch)")


def register(root: typer.Typer) -> None:
    """Add the `metastore` command group to the command line."""
    root.add_typer(app, name="metastore", rich_help_panel=PANEL_MAINTENANCE)
