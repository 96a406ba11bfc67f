"""`zarrlake purge`: remove the chunk bytes of arrays from every version, with a record."""

from __future__ import annotations

from typing import Annotated

import typer

from zarrlake.cli.context import PANEL_MAINTENANCE, console, escape, options, print_json, when
from zarrlake.cli.lifecycle import Bars, human


def purge(
    ctx: typer.Context,
    path: Annotated[
        list[str] | None, typer.Argument(help="Arrays to purge from every version.")
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why (kept in the record).")
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who asked (kept in the record).")] = None,
    region: Annotated[
        str | None,
        typer.Option(
            "--slice",
            metavar="REGION",
            help="With one PATH: only the chunks meeting this region, e.g. '0:10,:' (array "
            "indices).",
        ),
    ] = None,
    messages: Annotated[
        list[str] | None,
        typer.Option(
            "--messages",
            metavar="COMMIT",
            help="Redact this commit's messages where its id does not cover them: its "
            "session record, the pull request that merged it (repeatable).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Purge bytes a branch head or another array still holds too."),
    ] = False,
    keep_unremovable: Annotated[
        bool,
        typer.Option(
            "--keep-unremovable",
            help="Keep chunks of at most 64 bytes (inside manifests) and virtual chunks.",
        ),
    ] = False,
    keep_heads: Annotated[
        bool,
        typer.Option(
            "--keep-heads",
            help="Leave out what branch heads hold (the data rewritten there): purge history.",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; change nothing.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the purge records.")] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish purges a crash stopped half-way.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Remove the chunk bytes of PATH... (or a --slice of one) from every version: commits,
    ids and manifests stay, and reading a purged chunk at any version raises PurgedError
    naming the purge. Each purge is recorded (--list); `fsck --purges` proves it. Refused,
    saying why, when a branch head or another array still holds the bytes (--force).

    Example: zarrlake -r ./myrepo purge survey/names --reason "consent withdrawn" --by dpo
    """
    repo = options(ctx).open()
    if list_:
        records = repo.purges()
        if json_out:
            print_json([r.to_json() for r in records])
            return
        for r in records:
            console.print(
                f"{r.id}  {when(r.at)}  {r.state:<7}  by {r.by}: {r.reason}  ("
                + ", ".join(r.paths)
                + (f" slice {r.region}" if r.region else "")
                + f") {r.chunks} chunk(s), {r.objects} object(s), {r.ranges} range(s), "
                f"{human(r.bytes)}",
                soft_wrap=True,
                markup=False,
            )
        return
    if resume:
        done = repo.finish_purges()
        if json_out:
            print_json([r.to_json() for r in done])
            return
        console.print(f"finished {len(done)} purge(s)")
        return
    if reason is None or by is None:
        raise typer.BadParameter("a purge needs --reason and --by")
    with Bars(not json_out) as bars:
        record = repo.purge(
            path or [],
            reason=reason,
            by=by,
            region=region,
            force=force,
            keep_unremovable=keep_unremovable,
            keep_heads=keep_heads,
            messages=messages or [],
            dry_run=dry_run,
            progress=bars,
        )
    if json_out:
        print_json(record.to_json())
        return
    verb = "would remove" if dry_run else f"purge {record.id} removed"
    console.print(
        f"{verb} {record.chunks} chunk reference(s) in {record.commits} commit(s): "
        f"{record.objects} chunk object(s), {record.ranges} range(s) of shared objects, "
        f"{human(record.bytes)}"
    )
    for why in record.forced:
        console.print(f"  forced: {escape(why)}")
    if record.kept_inline or record.kept_virtual:
        console.print(
            f"  kept: {record.kept_inline} chunk(s) inside manifests, "
            f"{record.kept_virtual} virtual chunk(s)"
        )
    if record.kept_at_heads:
        console.print(f"  kept: {record.kept_at_heads} digest(s) branch heads hold")
    for what in record.redacted:
        console.print(f"  redacted: {escape(what)}")


def register(app: typer.Typer) -> None:
    """Add `purge` to the command line."""
    app.command(rich_help_panel=PANEL_MAINTENANCE)(purge)
