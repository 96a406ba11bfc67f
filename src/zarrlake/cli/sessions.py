"""Sessions (open transactions): list, show, abandon, extend."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from zarrlake.cli.context import (
    PANEL_SESSIONS,
    console,
    duration_option,
    duration_text,
    escape,
    options,
    parse_duration,
    print_json,
    usage_error,
    when,
)
from zarrlake.cli.history import diff_json, print_diff
from zarrlake.present import iso, short

if TYPE_CHECKING:
    from zarrlake.repo import Repo
    from zarrlake.session_records import SessionInfo
    from zarrlake.txn.writers import WriterInfo

sessions_app = typer.Typer(
    help="List, inspect, abandon or extend open sessions (default: list).\n\n"
    "Example: zarrlake -r ./myrepo sessions extend 3f2a9c 2d",
    invoke_without_command=True,
    no_args_is_help=False,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]
IdArg = Annotated[
    str,
    typer.Argument(
        metavar="ID", help="Session id or a unique prefix of it (from 'sessions list')."
    ),
]


def record_json(rec: SessionInfo) -> dict:
    """A session's record for `--json` output (times as ISO 8601)."""
    return {
        "id": rec.id,
        "branch": rec.branch,
        "base": rec.base_commit,
        "status": rec.state,
        "created": iso(rec.created),
        "expires_at": iso(rec.expires_at),
        "message": rec.message,
        "author": rec.author,
        "isolation": rec.isolation,
        "commit": rec.committed_as,
        "since": iso(rec.since) if rec.since is not None else None,
        "committer": (
            {"host": rec.committer[0], "pid": rec.committer[1]} if rec.committer else None
        ),
        "note": rec.note,
        "state": rec.describe(),
    }


def writer_json(w: WriterInfo) -> dict:
    """A session writer for `--json` output."""
    return {
        "writer": w.writer,
        "state": w.state,
        "pid": w.pid,
        "host": w.host,
        "since": iso(datetime.fromtimestamp(w.since, UTC)) if w.since is not None else None,
        "tag": w.tag,
        "error": w.error,
        "fragments": w.fragments,
        "chunks": w.chunks,
        "unflushed": w.unflushed,
    }


def writers_summary(writers: list[WriterInfo]) -> str:
    """'3 finished, 1 gone' (or '-')."""
    counts = Counter(w.state for w in writers)
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "-"


def current_sessions(repo: Repo, branch: str | None) -> list[SessionInfo]:
    """Open, committing and recently aborted sessions, each read through recovery (so a
    committer that died or outlived its lease shows as what it became); a record that
    cannot be checked now shows as stored."""
    from zarrlake.txn.commit import current_record

    ctx = repo._context
    return [current_record(ctx, rec).info(ctx.clock()) for rec in ctx.records.list_current(branch)]


def writers_cell(repo: Repo, info: SessionInfo) -> str | None:
    """The "writers" column of `sessions list`: its writers counted by state."""
    return writers_summary(repo.session_writers(info.id))


def _list(ctx: typer.Context, branch: str | None, json_out: bool) -> None:
    repo = options(ctx).open()
    records = current_sessions(repo, branch)
    if json_out:
        print_json(
            [
                record_json(r) | {"writers": [writer_json(w) for w in repo.session_writers(r.id)]}
                for r in records
            ]
        )
        return
    if not records:
        console.print("(no open sessions)")
        return
    writers = [writers_cell(repo, r) for r in records]
    show_writers = any(w is not None for w in writers)
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    columns = ["session", "branch", "base", "state"]
    columns += ["writers"] if show_writers else []
    columns += ["expires", "author", "message"]
    for col in columns:
        table.add_column(col)
    for r, w in zip(records, writers, strict=True):
        cells = [r.id, escape(r.branch), short(r.base_commit), escape(r.describe())]
        cells += [escape(w or "-")] if show_writers else []
        cells += [when(r.expires_at), escape(r.author or "-"), escape(r.message or "")]
        table.add_row(*cells)
    console.print(table)


@sessions_app.callback()
def _default(
    ctx: typer.Context,
    branch: Annotated[str | None, typer.Option(help="Only sessions on this branch.")] = None,
    json_out: JsonOpt = False,
) -> None:
    if ctx.invoked_subcommand is None:
        _list(ctx, branch, json_out)


@sessions_app.command("list")
def list_(
    ctx: typer.Context,
    branch: Annotated[str | None, typer.Option(help="Only sessions on this branch.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List open, unexpired sessions, and those being committed or recently aborted, with
    their state (committing since when, by which process; aborted and why).

    Example: zarrlake -r ./myrepo sessions list --branch main --json
    """
    _list(ctx, branch, json_out)


@sessions_app.command("show")
def show(ctx: typer.Context, session_id: IdArg, json_out: JsonOpt = False) -> None:
    """Show one session and, while it is open, its uncommitted changes.

    Example: zarrlake -r ./myrepo sessions show 3f2a9c0d1e2f3a4b5c6d
    """
    repo = options(ctx).open()
    rec = repo.session_info(session_id)
    changes = repo.join_session(rec.id).changes() if rec.state == "open" else None
    writers = repo.session_writers(rec.id)
    if json_out:
        out = record_json(rec)
        out["writers"] = [writer_json(w) for w in writers]
        out["changes"] = diff_json(changes) if changes is not None else None
        print_json(out)
        return
    for key, value in record_json(rec).items():
        if key == "status":  # the bare word; "state" below describes it
            continue
        console.print(f"{key + ':':12} {escape(str(value if value is not None else '-'))}")
    if writers:
        console.print("\nwriters:")
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for col in ("writer", "state", "process", "since", "flushed", "note"):
            table.add_column(col)
        for w in writers:
            table.add_row(
                w.writer,
                w.state,
                f"pid {w.pid} on {escape(w.host)}",
                when(datetime.fromtimestamp(w.since, UTC)) if w.since is not None else "-",
                f"{w.fragments} fragment(s), {w.chunks} chunk(s)"
                + (" + unflushed writes" if w.unflushed else ""),
                escape(w.error or (f"tag {w.tag}" if w.tag else "")),
            )
        console.print(table)
    if changes is not None:
        console.print("\nuncommitted changes:")
        print_diff(changes)


@sessions_app.command("abandon")
def abandon(
    ctx: typer.Context,
    session_id: Annotated[
        str | None,
        typer.Argument(
            metavar="ID", help="Session id or a unique prefix of it (from 'sessions list')."
        ),
    ] = None,
    older_than: Annotated[
        timedelta | None,
        duration_option("Instead of one ID: every open session at least this old"),
    ] = None,
    branch: Annotated[
        str | None, typer.Option(help="With --older-than: only sessions on this branch.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Abandon an open session (or, with --older-than, every open session at least that
    old): staged writes are discarded, no branch changes.

    Example: zarrlake -r ./myrepo sessions abandon --older-than 2h
    """
    if (session_id is None) == (older_than is None):
        raise usage_error("give a session ID or --older-than DURATION (not both)")
    if branch is not None and older_than is None:
        raise usage_error("--branch goes with --older-than")
    repo = options(ctx).open()
    if older_than is None:
        session = repo.join_session(session_id)
        session.abandon()
        if json_out:
            print_json({"id": session.id, "status": "abandoned"})
        else:
            console.print(f"Abandoned session {session.id}")
        return
    ids = repo.abandon_sessions(older_than, branch=branch)
    if json_out:
        print_json({"abandoned": ids})
        return
    for i in ids:
        console.print(f"Abandoned session {i}")
    if not ids:
        console.print(f"(no open session is {duration_text(older_than)} old or older)")


@sessions_app.command("extend")
def extend(
    ctx: typer.Context,
    session_id: IdArg,
    duration: Annotated[
        timedelta,
        typer.Argument(
            metavar="DURATION",
            parser=parse_duration,
            help="New expiry, counted from now: 2d, 12h, 30m (at most 7d).",
        ),
    ],
    json_out: JsonOpt = False,
) -> None:
    """Make an open session expire DURATION from now.

    Example: zarrlake -r ./myrepo sessions extend 3f2a9c 2d
    """
    session = options(ctx).open().join_session(session_id)
    session.update_expiration(duration)
    if json_out:
        print_json({"id": session.id, "expires_at": iso(session.expires_at)})
    else:
        console.print(f"Session {session.id} now expires at {when(session.expires_at)}")


def register(app: typer.Typer) -> None:
    """Add the `sessions` command group to the command line."""
    app.add_typer(sessions_app, name="sessions", rich_help_panel=PANEL_SESSIONS)
