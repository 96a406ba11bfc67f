"""The demo's terminal output (rich): section rules, a log table, a diff table, the
summary and the closing box. Rendering only; the story decides what happened."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from zarrlake.demo.data import GROUP, day_name
from zarrlake.demo.result import (
    AuditOutcome,
    FailedJob,
    GcOutcome,
    MergeOutcome,
    Replay,
    Summary,
    TimeTravel,
    WriterOutcome,
)
from zarrlake.present import diff_rows, short
from zarrlake.repo import Commit
from zarrlake.vc.diff import Diff


def mb(n: int) -> str:
    """A byte count for people: MB, or kB below one MB."""
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


class Narrator:
    """Prints the story; to stdout, or to stderr when stdout carries JSON."""

    def __init__(self, stderr: bool = False) -> None:
        stream = sys.stderr if stderr else sys.stdout
        width = None if stream.isatty() else 110
        self.console = Console(file=stream, highlight=False, width=width)
        self.sections = 0

    def say(self, text: str) -> None:
        """Print one line of the story."""
        self.console.print(text)

    def banner(self, directory: str, replaced: bool) -> None:
        """Print the opening panel: what zarrlake is, when and where the demo runs."""
        self.console.print(
            Panel(
                "zarrlake: Zarr arrays with database guarantees: atomic commits, snapshot "
                "isolation, branches, tags and chunk-level conflict detection.\n"
                f"Started {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC; repository {directory}",
                title="zarrlake demo",
                expand=False,
            )
        )
        if replaced:
            self.say(f"[yellow]Replaced the previous demo repository at {directory}[/]")

    def section(self, title: str) -> None:
        """A numbered part of the story."""
        self.sections += 1
        self.console.print()
        self.console.print(Rule(f"[bold]{self.sections}. {title}[/]", align="left"))

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[DayProgress]:
        """A progress bar over `total` days; the yielded handle reports each one."""
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
        ) as progress:
            yield DayProgress(progress, progress.add_task(description, total=total))

    def log(self, commits: Iterable[Commit], total: int) -> None:
        """The newest commits, as `zarrlake log` shows them."""
        table = Table(box=None, header_style="bold")
        for col in ("commit", "time", "author", "message"):
            table.add_column(col)
        for c in commits:
            table.add_row(
                f"[yellow]{short(c.id)}[/]",
                f"{c.timestamp:%H:%M:%S}",
                escape(c.author or "-"),
                escape(c.message),
            )
        self.console.print(table)
        self.say(f"... {total} commits on main.\n")

    def diff(self, d: Diff) -> None:
        """Print a diff as a table of changed nodes, or "(no changes)"."""
        rows = diff_rows(d)
        if not rows:
            self.say("(no changes)")
            return
        table = Table(box=None, header_style="bold")
        for col in ("path", "change"):
            table.add_column(col, justify="left")
        table.add_column("chunks written", justify="right")
        table.add_column("chunks deleted", justify="right")
        for path, status, written, deleted in rows:
            table.add_row(escape(path), status, str(written), str(deleted))
        self.console.print(table)

    def time_travel(self, tt: TimeTravel, last_day: int) -> None:
        """Tell what reading at the tag showed against main."""
        self.say(
            f"\n[bold]Time travel.[/] {tt.tag} was tagged at {short(tt.tag_commit)}; "
            f"{tt.days_after_tag} more day{'s' if tt.days_after_tag != 1 else ''} landed since."
        )
        same = "byte-identical" if tt.first_day_identical else "[red]DIFFERENT[/]"
        self.say(
            f"  {day_name(0)} at {tt.tag} and at main: {same} "
            f"(mean t2m {tt.first_day_mean:.2f} degC)"
        )
        at_tag = "not yet ingested (all NaN)" if tt.last_day_empty_at_tag else "has data"
        self.say(
            f"  {day_name(last_day)} at {tt.tag}: {at_tag}; "
            f"at main: mean t2m {tt.last_day_mean:.2f} degC"
        )

    def replay(self, r: Replay) -> None:
        """Tell what re-running a day's job did: a commit without changes, nothing stored twice."""
        changes = "no changes" if not any(r.changes.values()) else str(r.changes)
        self.say(
            f"\n[bold]Idempotent re-run.[/] The job for {r.day} ran again (a retried "
            f"pipeline). It changed nothing, so its commit was refused: {escape(r.refused)}. "
            "Run again with .option('allow_empty', 'true'), "
            f"commit {short(r.commit)} landed; diff against the previous head: "
            f"{changes}; it sent {mb(r.day_bytes)}, the repository's objects grew by "
            f"{mb(r.disk_bytes_added)} (the commit's own records: identical chunks "
            "are stored once)."
        )

    def writers(self, outcomes: Iterable[WriterOutcome]) -> None:
        """Tell which concurrent writers landed and which hit a conflict (and on what)."""
        for w in outcomes:
            if w.status == "landed":
                self.say(f"  {w.name}: {w.region} -> landed {short(w.commit)}")
            else:
                self.say(f"  {w.name}: {w.region} -> [red]ConflictError[/]")
                for c in w.conflicts:
                    self.say(f"      {escape(c)}")

    def failed_job(self, f: FailedJob) -> None:
        """Tell that a failed job left main, its data and its sessions as they were."""
        self.say(f"  the job failed: [red]{escape(f.error)}[/]")
        moved = "unchanged" if f.head_after == f.head_before else "[red]MOVED[/]"
        data = "untouched" if f.data_untouched else "[red]CHANGED[/]"
        self.say(
            f"  main is still at {short(f.head_after)} ({moved}), the day's data is {data}, "
            f"open sessions left behind: {f.open_sessions} (the job's session was abandoned)"
        )

    def merge(self, m: MergeOutcome) -> None:
        """Tell what merging the branch into main did."""
        self.say(
            f"  merged {m.branch} ({short(m.branch_commit)}) into main: {short(m.merge_commit)}"
            f"; main {'has' if m.main_has_change else '[red]lacks[/]'} the branch's change"
        )

    def audit_refused(self, pr: int, branch: str, check: str, message: str, refused: str) -> None:
        """Tell which check failed on the pull request and why its merge was refused."""
        self.say(f"  ingested into {branch}; pull request #{pr} into main")
        self.say(f"  check {check} [red]failed[/]: {escape(message)}")
        self.say(f"  merge refused: {escape(refused)}")

    def audit(self, a: AuditOutcome) -> None:
        """Tell how the reprocessed day was fixed and published."""
        passed = ", ".join(
            f"{name} {'passed' if ok else '[red]failed[/]'}"
            for name, ok in a.checks_after_fix.items()
        )
        self.say(f"  fixed on {a.branch}: {short(a.fix_commit)}; checks now: {passed}")
        self.say(
            f"  pull request #{a.pull_request} {a.state}: main {short(a.merge_commit)} "
            f"{'has' if a.main_has_fix else '[red]lacks[/]'} the audited day; "
            f"{a.branch} {'deleted' if a.branch_deleted else 'kept'}"
        )

    def gc(self, g: GcOutcome) -> None:
        """Tell what garbage collection deleted and reclaimed."""
        self.say("[bold]$ zarrlake gc --older-than 0s --full[/]")
        self.say(
            f"  deleted {g.objects_deleted:,} objects that no commit references, "
            f"{mb(g.bytes_reclaimed)} reclaimed (the failed job's uploads and writer-B's "
            f"abandoned attempt); the repository's objects went from "
            f"{mb(g.object_bytes_before)} to {mb(g.object_bytes_after)}"
        )

    def summary(self, s: Summary, elapsed: float) -> None:
        """Print the closing table: commits, refs, arrays, chunks, bytes written and stored."""
        table = Table(show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column(justify="right")
        ratio = f"{s.written_bytes / s.stored_bytes:.1f}x" if s.stored_bytes else "-"
        for k, v in (
            ("commits on main", f"{s.commits}"),
            ("branches / tags", f"{s.branches} / {s.tags}"),
            ("arrays", f"{s.arrays}"),
            ("chunks in main", f"{s.chunks:,}"),
            ("array data, uncompressed", mb(s.logical_bytes)),
            ("array bytes written by all commits", mb(s.written_bytes)),
            ("chunk bytes stored", mb(s.stored_bytes)),
            ("written / stored (compression + dedup)", ratio),
            ("bytes on disk (objects + metastore)", mb(s.disk_bytes)),
            ("wall time", f"{elapsed:.0f} s"),
        ):
            table.add_row(k, v)
        self.console.print(table)

    def done(self, directory: str, ui: bool = True) -> None:
        """Print where the repository is and commands to explore it."""
        r = f"zarrlake -r {directory}"
        lines = [
            f"Repository: [bold]{directory}[/] (objects + metastore.sqlite)",
            "The zarrlake command is in the project's virtualenv: run "
            "[bold]source .venv/bin/activate[/]",
            "first, or call it as [bold].venv/bin/zarrlake[/].",
            f"Explore it:  {r} log --limit 5",
            f"             {r} ls main",
            f"             {r} diff v1.0 main",
            f'             {r} cat v1.0 {GROUP}/t2m --slice "0,0:4,0:4"',
        ]
        if ui:
            lines.append(f"Browse it:   {r} ui")
        self.console.print(Panel("\n".join(lines), title="done", expand=False))


class DayProgress:
    """The ingest progress bar, with a line printed above it per finished day."""

    def __init__(self, progress: Progress, task) -> None:
        self._progress = progress
        self._task = task

    def day(self, day: int, rows: int, commit: str, seconds: float) -> None:
        """Report one ingested day (rows, commit, time) and advance the bar."""
        self._progress.console.print(
            f"  {day_name(day)}: {rows:,} rows -> commit [yellow]{short(commit)}[/] "
            f"({seconds:.1f} s)"
        )
        self._progress.advance(self._task)

    def note(self, text: str) -> None:
        """Print a note above the progress bar."""
        self._progress.console.print(f"  {text}")
