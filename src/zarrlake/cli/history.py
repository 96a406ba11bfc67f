"""History: log, show (one commit and its changes) and diff (between any two refs)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from zarrlake.cli.context import console, iso, options, print_json, short, when
from zarrlake.diff import Diff

JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]


def commit_json(c) -> dict:
    return {
        "id": c.id,
        "parents": list(c.parent_ids),
        "message": c.message,
        "author": c.author,
        "timestamp": iso(c.timestamp),
        "session_id": c.session_id,
    }


def diff_rows(d: Diff) -> list[tuple[str, str, int, int]]:
    """(path, what happened to the node, chunks written, chunks deleted), by path."""
    paths = (
        d.nodes_added
        | d.nodes_deleted
        | d.metadata_changed
        | d.chunks_written.keys()
        | d.chunks_deleted.keys()
    )
    rows = []
    for p in sorted(paths):
        if p in d.nodes_added:
            status = "added"
        elif p in d.nodes_deleted:
            status = "deleted"
        elif p in d.metadata_changed:
            status = "metadata changed"
        else:
            status = "data"
        rows.append(
            (p or "/", status, len(d.chunks_written.get(p, ())), len(d.chunks_deleted.get(p, ())))
        )
    return rows


def diff_json(d: Diff) -> dict:
    out = d.to_json()
    out["summary"] = [
        {"path": p, "change": s, "chunks_written": w, "chunks_deleted": x}
        for p, s, w, x in diff_rows(d)
    ]
    return out


def print_diff(d: Diff) -> None:
    rows = diff_rows(d)
    if not rows:
        console.print("(no changes)")
        return
    table = Table(box=None, header_style="bold")
    table.add_column("path")
    table.add_column("change")
    table.add_column("chunks written", justify="right")
    table.add_column("chunks deleted", justify="right")
    colour = {"added": "green", "deleted": "red", "metadata changed": "yellow", "data": ""}
    for p, s, w, x in rows:
        table.add_row(escape(p), f"[{colour[s]}]{s}[/]" if colour[s] else s, str(w), str(x))
    console.print(table)


def log(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Branch, tag or commit id.")] = "main",
    limit: Annotated[int | None, typer.Option(min=0, help="Show at most N commits.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the commits reachable from REF, newest first.

    Example: zarrlake -r ./myrepo log main --limit 5 --json
    """
    commits = options(ctx).open().log(ref, limit=limit)
    if json_out:
        print_json([commit_json(c) for c in commits])
        return
    table = Table(box=None, header_style="bold")
    for col in ("commit", "time", "author", "message"):
        table.add_column(col)
    for c in commits:
        table.add_row(
            f"[yellow]{short(c.id)}[/]",
            when(c.timestamp),
            escape(c.author or "-"),
            escape(c.message),
        )
    console.print(table)


def show(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Branch, tag or commit id.")],
    json_out: JsonOpt = False,
) -> None:
    """Show one commit's details and the changes it made to its parent.

    Example: zarrlake -r ./myrepo show v1.0
    """
    repo = options(ctx).open()
    commit = repo.log(ref, limit=1)[0]
    parent = commit.parent_ids[0] if commit.parent_ids else None
    changes = repo.diff(parent, commit.id) if parent else Diff()
    if json_out:
        print_json({"commit": commit_json(commit), "changes": diff_json(changes)})
        return
    console.print(f"[yellow]commit {commit.id}[/]")
    console.print(f"parent:  {parent or '(none: initial commit)'}")
    console.print(f"author:  {escape(commit.author or '-')}")
    console.print(f"date:    {when(commit.timestamp)}")
    console.print(f"session: {commit.session_id or '-'}")
    console.print(f"\n    {escape(commit.message)}\n")
    print_diff(changes)


def diff(
    ctx: typer.Context,
    from_ref: Annotated[str, typer.Argument(metavar="A", help="The older ref.")],
    to_ref: Annotated[str, typer.Argument(metavar="B", help="The newer ref.")],
    json_out: JsonOpt = False,
) -> None:
    """Show what changed from A to B: nodes added, deleted, metadata changed, and chunks
    written/deleted per array.

    Example: zarrlake -r ./myrepo diff v1.0 main --json
    """
    d = options(ctx).open().diff(from_ref, to_ref)
    if json_out:
        print_json(diff_json(d))
        return
    print_diff(d)


def register(app: typer.Typer) -> None:
    app.command()(log)
    app.command()(show)
    app.command()(diff)
