"""Storage lifecycle commands: gc (reclaim unreachable objects) and expire (drop old history)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from zarrlake.cli.context import (
    PANEL_MAINTENANCE,
    console,
    duration_option,
    duration_text,
    options,
    print_json,
)
from zarrlake.present import short

PHASES = {
    "sessions": "settling sessions",
    "marking": "marking live objects",
    "listing": "listing objects",
    "deleting": "deleting",
}


def human(n: int) -> str:
    """A byte count in binary units (B to TiB), for people."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


class Bars:
    """Progress bars on stderr (so --json output on stdout stays clean), one per phase."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        err = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not enabled or not err.is_terminal,
        )
        self.tasks: dict[str, int] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        """Show `done` of `total` for `phase` (the gc and expire progress callback)."""
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(PHASES.get(phase, phase), total=total)
        self.progress.update(self.tasks[phase], completed=done, total=total)

    def __enter__(self) -> Bars:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)


def gc(
    ctx: typer.Context,
    older_than: Annotated[
        timedelta, duration_option("Grace period: only garbage known for this long", default="1h")
    ] = timedelta(hours=1),
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be deleted; delete nothing.")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="Also list every object (finds crash leftovers).")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Delete objects that nothing can reach (no branch, tag, retained commit or open
    session), once known to be garbage for at least --older-than.

    Example: zarrlake -r ./myrepo gc --older-than 1h --dry-run
    """
    repo = options(ctx).open()
    with Bars(not json_out) as bars:
        report = repo.gc(older_than, dry_run=dry_run, full=full, progress=bars)
    if json_out:
        print_json(report.to_json())
        return
    verb = "would delete" if dry_run else "deleted"
    from rich.table import Table

    table = Table(title=None, show_edge=False)
    table.add_column("kind")
    table.add_column("objects", justify="right")
    table.add_column("bytes", justify="right")
    for kind, (n, b) in sorted(report.by_kind.items()):
        table.add_row(kind, str(n), human(b))
    if report.by_kind:
        console.print(table)
    console.print(
        f"gc {verb} {report.objects_deleted} object(s), {human(report.bytes_deleted)} "
        f"({report.bytes_deleted} bytes) in {report.seconds:.2f}s"
    )
    console.print(
        f"  sessions expired: {report.sessions_expired}, staged records deleted: "
        f"{report.staged_records_deleted}, garbage younger than {duration_text(older_than)}: "
        f"{report.candidates_pending}, deferred (commit in progress): {report.deferred}"
    )


def expire(
    ctx: typer.Context,
    older_than: Annotated[timedelta, duration_option("Expire commits older than this")],
    branch: Annotated[
        list[str] | None,
        typer.Option("--branch", help="Only this branch's history (repeatable; default all)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Drop commits older than --older-than from the history (branch heads and tags stay);
    run gc afterwards to reclaim what only they used.

    Example: zarrlake -r ./myrepo expire --older-than 30d --branch main
    """
    repo = options(ctx).open()
    report = repo.expire(older_than, branches=branch or None)
    if json_out:
        print_json(report.to_json())
        return
    console.print(f"expired {report.commits_expired} commit(s) older than {report.cutoff}")
    for name, cid in sorted(report.oldest_retained.items()):
        console.print(f"  {name}: history now ends at {short(cid)}")
    if report.kept:
        console.print(f"kept {len(report.kept)} commit(s) older than that, because:")
        for reason, count in report.reasons():
            console.print(f"  {count} {reason}", markup=False)


def register(app: typer.Typer) -> None:
    """Add `gc` and `expire` to the command line."""
    app.command("gc", rich_help_panel=PANEL_MAINTENANCE)(gc)
    app.command("expire", rich_help_panel=PANEL_MAINTENANCE)(expire)
