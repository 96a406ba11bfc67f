"""Repository-level commands: init, fsck and the demo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from zarrlake.cli.context import (
    PANEL_MAINTENANCE,
    PANEL_SETUP,
    PANEL_TOOLS,
    console,
    describe_metastore,
    error_line,
    escape,
    options,
    print_json,
)
from zarrlake.errors import InvalidInputError
from zarrlake.present import iso, short

if TYPE_CHECKING:
    from zarrlake.repo import Repo
    from zarrlake.vc.fsck import Problem


def init(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Create a new, empty repository (one initial commit on main).

    Example: zarrlake -r ./myrepo init
    """
    from zarrlake.cli.redact import redact

    repo = options(ctx).create()
    head = repo.resolve("main")
    location = redact(repo.spec.location)
    if json_out:
        print_json({"location": location, "metastore": redact(repo.spec.metastore), "main": head})
        return
    console.print(f"Initialized empty zarrlake repository at [bold]{escape(location)}[/]")
    console.print(f"  metastore: {escape(describe_metastore(repo.spec.metastore))}", soft_wrap=True)
    console.print(f"  main -> {short(head)}")


class FsckCounts:
    """What fsck read: commits, objects and bytes; drives a progress display on stderr."""

    def __init__(self, progress: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        err = Console(stderr=True)
        self.commits = self.objects = self.bytes = 0
        self.progress = Progress(
            TextColumn("checking"),
            BarColumn(),
            TextColumn("{task.fields[what]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not progress or not err.is_terminal,
        )
        self.task = self.progress.add_task("fsck", total=None, what="")
        self.decoding: Any = None  # the decoding bar, once chunks are decoded
        self.decoded = 0

    def on_decoded(self, done: int, queued: int) -> None:
        """Follow the chunks decoded (`--decode`): a bar of those decoded among those
        found so far (called from the decoding threads)."""
        self.decoded = done
        if self.decoding is None:
            self.decoding = self.progress.add_task("decode", total=queued, what="decoding")
        self.progress.update(self.decoding, completed=done, total=queued, what=f"decoded {done}")

    def __call__(self, key: str, size: int) -> None:
        """Count one object read by fsck (the progress callback) and update the display."""
        self.objects += 1
        self.bytes += size
        self.commits += key.startswith("commits/")
        self.progress.update(self.task, what=self.summary())

    def summary(self) -> str:
        """The running totals in words, for the progress line."""
        out = f"{self.commits} commits, {self.objects} objects, {human(self.bytes)}"
        return out + (f", {self.decoded} chunks decoded" if self.decoding is not None else "")

    def to_json(self) -> dict[str, int]:
        """The totals for `--json` output."""
        out = {"commits": self.commits, "objects": self.objects, "bytes": self.bytes}
        return out | ({"decoded": self.decoded} if self.decoding is not None else {})


def human(n: int) -> str:
    """A byte count in binary units (B, KiB, MiB, GiB), for people."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def fsck(
    ctx: typer.Context,
    ref: Annotated[
        str | None,
        typer.Argument(metavar="REF", help="Check only what this ref reaches (default: all refs)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print problems as JSON.")] = False,
    sources: Annotated[
        bool, typer.Option("--sources", help="Check only that virtual sources are unchanged.")
    ] = False,
    purges: Annotated[
        bool,
        typer.Option(
            "--purges",
            help="Prove the purges instead: each finished, no purged object or range holds "
            "its bytes.",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="With --purges: also check this copy carries every purge of the repository "
            "at this location (the one it was cloned from).",
        ),
    ] = None,
    decode: Annotated[
        bool,
        typer.Option(
            "--decode", help="Also decode every chunk with its array's codecs (in parallel)."
        ),
    ] = False,
    arrays: Annotated[
        list[str] | None,
        typer.Option(
            "--arrays",
            help="With --decode: only these arrays (paths or globs; repeatable, or "
            "comma-separated).",
        ),
    ] = None,
) -> None:
    """Verify every object reachable from REF (or every branch and tag): checksums,
    missing objects, inconsistent references, virtual sources changed since import, each
    problem listed once; with --decode, also that zarr can decode every chunk. Prints what
    it checked (commits, objects, bytes) and where `expire` ended the history (not a
    problem); exits 1 if anything is wrong.

    Example: zarrlake -r ./myrepo fsck main --decode --arrays weather/t2m
    """
    if purges:
        fsck_purges(ctx, against, json_out)
        return
    counts = FsckCounts(progress=not json_out)
    expired: list = []
    wanted = [a for arg in arrays for a in arg.split(",") if a] if arrays else None
    check = Check(ref, sources, decode, wanted)
    if json_out:  # one JSON document, whatever happens
        fsck_json(ctx, check, counts, expired)
        return
    repo = options(ctx).open()
    with counts.progress:
        problems = [str(p) for p in check.run(repo, counts, expired)]
    if problems:
        console.print(f"[red]{len(problems)} problem(s) found[/] (read {counts.summary()}):")
        for p in problems:
            console.print(f"  {p}", markup=False)
    else:
        what = f"ref {ref!r}" if ref else "all branches and tags"
        console.print(f"[green]ok[/]: checked {counts.summary()} reachable from {escape(what)}")
    for e in expired:
        console.print(f"  {e} (expire; not a problem)", markup=False)
    if problems:
        raise typer.Exit(1)


@dataclass(frozen=True)
class Check:
    """What `fsck` was asked to check."""

    ref: str | None
    sources: bool
    decode: bool
    arrays: list[str] | None

    def run(self, repo: Repo, counts: FsckCounts, expired: list) -> list[Problem]:
        """Run the check on `repo`, counting into `counts`, noting ends of history."""
        if self.arrays and not self.decode:
            raise InvalidInputError("--arrays limits the chunks --decode decodes: add --decode")
        return repo.fsck(
            self.ref,
            on_read=counts,
            on_expired=expired.append,
            sources_only=self.sources,
            decode=self.decode,
            arrays=self.arrays,
            on_decoded=counts.on_decoded if self.decode else None,
        )


def fsck_json(ctx: typer.Context, check: Check, counts: FsckCounts, expired: list) -> None:
    """`fsck --json`: print exactly one JSON document (problems, expired history, and under
    `error` the error that stopped the check, if one did); exit 1 unless all is well."""
    problems: list[str] = []
    error: str | None = None
    ref = check.ref
    try:
        repo = options(ctx).open()
        problems = [str(p) for p in check.run(repo, counts, expired)]
    except Exception as e:  # reported inside the document instead of as a second output
        error = error_line(e)
    ends = [
        {"commit": e.commit, "expired_parent": e.parent, "expired_at": iso(e.expired_at)}
        for e in expired
    ]
    report = {
        "ref": ref,
        "ok": not problems and error is None,
        "checked": counts.to_json(),
        "problems": problems,
        "expired_history": ends,
    }
    print_json(report if error is None else {**report, "error": error})
    if problems or error is not None:
        raise typer.Exit(1)


def fsck_purges(ctx: typer.Context, against: str | None, json_out: bool) -> None:
    """`fsck --purges`: prove every purge; exit 1 unless all are proven."""
    from zarrlake.repo import Repo

    opts = options(ctx)
    repo = opts.open()
    other = None
    if against is not None:
        other = Repo.open(against, storage_options=opts.storage_options or None)
    problems = [str(p) for p in repo.fsck(purges=True, against=other)]
    records = repo.purges()
    if json_out:
        print_json({"ok": not problems, "purges": [r.id for r in records], "problems": problems})
    elif problems:
        console.print(f"[red]{len(problems)} problem(s) found[/] in {len(records)} purge(s):")
        for p in problems:
            console.print(f"  {p}", markup=False)
    else:
        digests = sum(r.digests for r in records)
        console.print(
            f"[green]ok[/]: {len(records)} purge(s) proven; no purged object or range "
            f"({digests} digest(s)) holds its bytes"
        )
    if problems:
        raise typer.Exit(1)


def demo(
    directory: Annotated[
        Path,
        typer.Option(
            "--dir",
            help="Where to build the demo repository: a new or empty directory, or one an "
            "earlier demo made (replaced).",
        ),
    ] = Path("demo-repo"),
    days: Annotated[int, typer.Option(min=3, max=366, help="Days of hourly data.")] = 30,
    small: Annotated[
        bool, typer.Option("--small", help="A small grid (for tests and slow machines).")
    ] = False,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print what happened as JSON (the story goes to stderr)."),
    ] = False,
) -> None:
    """Run the product tour: Spark ingestion (one commit per day), tags and time travel,
    concurrent writers and conflicts, a failed job that leaves no trace, a merge, and a
    summary. Refuses a directory that holds anything but an earlier demo.

    Example: zarrlake demo --dir /tmp/demo --days 10 --small
    """
    from zarrlake.demo import DemoConfig, Narrator, run

    result = run(
        DemoConfig.sized(directory=directory, days=days, small=small), Narrator(stderr=json_out)
    )
    if json_out:
        print_json(result.to_json())


def register(app: typer.Typer) -> None:
    """Add `init`, `fsck` and `demo` to the command line."""
    app.command(rich_help_panel=PANEL_SETUP)(init)
    app.command(rich_help_panel=PANEL_MAINTENANCE)(fsck)
    app.command(rich_help_panel=PANEL_TOOLS)(demo)
