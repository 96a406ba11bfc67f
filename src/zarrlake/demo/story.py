"""The demo's story, told with real work through the public API: a dataset ingested by one
Spark job per day, history and time travel, an idempotent re-run, concurrent writers with
and without a conflict, a Spark job that fails half-way, a fix merged from a release branch,
a reprocessed day published through checks and a pull request (write-audit-publish),
garbage collection, and a summary."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from zarrlake import checks
from zarrlake.demo.config import DemoConfig
from zarrlake.demo.data import GROUP, START, VARIABLES, coordinates, day_name
from zarrlake.demo.directory import prepare_directory
from zarrlake.demo.render import Narrator
from zarrlake.demo.result import (
    AuditOutcome,
    DemoResult,
    FailedJob,
    GcOutcome,
    MergeOutcome,
    Replay,
    Summary,
    TimeTravel,
    WriterOutcome,
)
from zarrlake.demo.spark import ingest_day, job_error, start_spark
from zarrlake.demo.writers import WriterJob, apply, run_pair
from zarrlake.errors import PullRequestBlockedError
from zarrlake.repo import Repo

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

AUTHOR = "demo"
T2M = f"{GROUP}/t2m"


class Story:
    """One run of the demo on one repository; each step returns what it observed."""

    def __init__(self, cfg: DemoConfig, repo: Repo, narrator: Narrator) -> None:
        self.cfg = cfg
        self.grid = cfg.grid
        self.repo = repo
        self.say = narrator
        self.written_bytes = 0  # array bytes sent by every committed job, uncompressed

    def _read(self, ref: str, array: str, region: tuple[slice, ...]) -> np.ndarray:
        import zarr

        store = self.repo.readonly_session(ref).store
        return zarr.open_array(store, path=array, mode="r")[region]

    def _ingest(self, spark: SparkSession, day: int, arrays: list[str] | None = None, **kw) -> None:
        arrays = arrays or self.cfg.arrays
        ingest_day(spark, self.cfg.location, arrays, self.grid, day, **kw)

    def create_dataset(self) -> str:
        """Commit the empty arrays with their coordinates: the layout every day fills in."""
        import zarr

        session = self.repo.create_session(message="Create the weather dataset", author=AUTHOR)
        root = zarr.open_group(session.store, mode="a")
        group = root.create_group(
            GROUP,
            attributes={"title": "zarrlake demo: hourly weather", "source": "synthetic"},
        )
        for name, (long_name, units) in VARIABLES.items():
            group.create_array(
                name,
                shape=self.grid.shape,
                chunks=self.grid.chunks,
                dtype="f4",
                fill_value=np.nan,
                dimension_names=["time", "lat", "lon"],
                attributes={"long_name": long_name, "units": units},
            )
        lats, lons = coordinates(self.grid)
        hours = np.arange(self.grid.hours, dtype="i8")
        time_units = f"hours since {START.isoformat()} 00:00:00"
        for name, values, attrs in (
            ("lat", lats, {"units": "degrees_north"}),
            ("lon", lons, {"units": "degrees_east"}),
            ("time", hours, {"units": time_units, "calendar": "standard"}),
        ):
            arr = group.create_array(
                name, shape=values.shape, dtype=values.dtype, dimension_names=[name],
                attributes=attrs,
            )  # fmt: skip
            arr[:] = values
            self.written_bytes += values.nbytes
        commit = session.commit("Create the weather dataset")
        self.say.say(
            f"Committed the empty dataset layout ({GROUP}/t2m, u10, v10 + coordinates): "
            f"{commit[:12]}"
        )
        return commit

    def ingest(self, spark: SparkSession) -> list[str]:
        """Part 1: a Spark job per day, one commit each; the release tag after some days."""
        grid = self.grid
        self.say.section(f"Ingest {grid.days} days with Spark, one job and one commit per day")
        self.say.say(
            f"Grid {grid.lat} x {grid.lon} (lat x lon), hourly, variables "
            f"{', '.join(VARIABLES)}; chunks {grid.chunks}; {grid.days * grid.rows_per_day:,} "
            f"rows, {grid.raw_bytes() / 1e6:,.0f} MB of float32 in total. "
            f"Spark master {self.cfg.master}."
        )
        commits: list[str] = []
        with self.say.progress("ingesting days", grid.days) as progress:
            for day in range(grid.days):
                t0 = time.perf_counter()
                self._ingest(spark, day)
                self.written_bytes += grid.day_bytes()
                commits.append(self.repo.resolve("main"))
                progress.day(day, grid.rows_per_day, commits[-1], time.perf_counter() - t0)
                if day + 1 == self.cfg.tag_after:
                    self.repo.create_tag("v1.0", at=commits[-1])
                    progress.note(
                        f"[green]tagged v1.0[/] at {commits[-1][:12]} (the first "
                        f"{self.cfg.tag_after} days: a release for downstream users)"
                    )
        return commits

    def history(self, commits: list[str]) -> TimeTravel:
        """Part 2: log, a diff between two days, and a time-travel read at the tag."""
        repo = self.repo
        self.say.section("History: log, diff, time travel")
        self.say.say("[bold]$ zarrlake log main --limit 5[/]")
        self.say.log(repo.log("main", limit=5), len(repo.log("main")))
        a, b = commits[1], commits[2]
        self.say.say(f"[bold]$ zarrlake diff {a[:12]} {b[:12]}[/]  (day 3)")
        self.say.diff(repo.diff(a, b))

        last = self.grid.days - 1
        first_day = (slice(0, 24),)
        last_day = (slice(24 * last, 24 * last + 24),)
        tag_first, tag_last = (self._read("v1.0", T2M, r) for r in (first_day, last_day))
        main_first, main_last = (self._read("main", T2M, r) for r in (first_day, last_day))
        tt = TimeTravel(
            tag="v1.0",
            tag_commit=repo.resolve("v1.0"),
            days_after_tag=self.grid.days - self.cfg.tag_after,
            first_day_identical=bool(np.array_equal(tag_first, main_first, equal_nan=True)),
            last_day_empty_at_tag=bool(np.isnan(tag_last).all()),
            last_day_complete_at_main=not bool(np.isnan(main_last).any()),
            first_day_mean=float(np.nanmean(tag_first)),
            last_day_mean=float(np.nanmean(main_last)),
        )
        self.say.time_travel(tt, last)
        return tt

    def replay(self, spark: SparkSession) -> Replay:
        """A retried pipeline re-ingests a day with the same bytes: refused as a commit that
        changes nothing; asked to, an empty commit, and no new data."""
        before, stored = self.repo.resolve("main"), self.repo.stats("main").bytes
        on_disk = object_bytes(self.cfg.directory)
        try:
            self._ingest(spark, 1)
            refused = ""
        except Exception as e:  # NoChangesError, raised by the job's commit on the driver
            refused = job_error(e)
        self._ingest(spark, 1, allow_empty=True)
        self.written_bytes += self.grid.day_bytes()  # the refused run committed nothing
        after = self.repo.resolve("main")
        r = Replay(
            day=day_name(1),
            previous_head=before,
            commit=after,
            changes=self.repo.diff(before, after).to_json(),
            stored_bytes_added=self.repo.stats("main").bytes - stored,
            disk_bytes_added=object_bytes(self.cfg.directory) - on_disk,
            day_bytes=self.grid.day_bytes(),
            refused=refused,
        )
        self.say.replay(r)
        return r

    def _landed(self, outcome: WriterOutcome, job: WriterJob) -> None:
        if outcome.status == "landed":
            self.written_bytes += region_bytes(job.region, self.grid.shape)

    def concurrency(self) -> tuple[list[WriterOutcome], list[WriterOutcome], WriterOutcome]:
        """Part 3: concurrent writers; disjoint chunks both land, overlapping chunks conflict
        and the loser retries from the new head."""
        self.say.section("Concurrent writers, each with its own session")
        lc, oc = self.grid.lat_chunk, self.grid.lon_chunk
        day1, day2 = slice(0, 24), slice(24, 48)
        north = WriterJob("north-station-team", T2M, (day1, slice(0, lc), slice(None)), 0.5)
        south = WriterJob("south-station-team", T2M, (day1, slice(lc, 2 * lc), slice(None)), -0.3)
        disjoint = run_pair(self.cfg.location, north, south, ordered=False)
        for outcome, job in zip(disjoint, (north, south), strict=True):
            self._landed(outcome, job)
        self.say.writers(disjoint)
        if all(w.status == "landed" for w in disjoint):
            self.say.say(
                "  [green]Both landed[/]: the second commit found the branch moved, saw no "
                "overlapping chunk in the first one's change set, and rebased onto it."
            )
        # A covers chunks (1, 0, 0) and (1, 1, 0); B only (1, 1, 0); B commits after A.
        a = WriterJob("writer-A", T2M, (day2, slice(0, lc + lc // 2), slice(0, oc)), 1.0)
        b = WriterJob("writer-B", T2M, (day2, slice(lc, 2 * lc), slice(0, oc)), 2.0)
        overlapping = run_pair(self.cfg.location, a, b, ordered=True)
        for outcome, job in zip(overlapping, (a, b), strict=True):
            self._landed(outcome, job)
        self.say.writers(overlapping)
        session = self.repo.create_session(message="writer-B retry", author=b.name)
        apply(session, b)
        commit = session.commit(f"{b.name}: bias-correct {b.describe()} (retried)")
        retry = WriterOutcome(b.name, b.describe(), "landed", commit)
        self._landed(retry, b)
        self.say.say(
            f"  {b.name} retried from the new head {session.base_commit[:12]}: landed "
            f"{commit[:12]} (its change now applies on top of A's)"
        )
        return disjoint, overlapping, retry

    def failed_job(self, spark: SparkSession) -> FailedJob:
        """Part 4: a Spark job whose task raises half-way leaves no trace on the branch."""
        self.say.section("A Spark job that fails half-way")
        day, fail_chunk = 2, self.grid.spatial_chunks // 2
        probe = (slice(24 * day, 24 * day + 24),)
        head = self.repo.resolve("main")
        before = self._read("main", f"{GROUP}/u10", probe)
        self.say.say(
            f"Re-processing {day_name(day)} from revised upstream files, with a task that "
            f"raises on spatial chunk {fail_chunk} (of {self.grid.spatial_chunks}) after "
            "other tasks have uploaded their new chunks..."
        )
        try:
            self._ingest(spark, day, fail_chunk=fail_chunk, revision=1)
            error = "(the job did not fail)"
        except Exception as e:  # the job's failure is the point of this step
            error = job_error(e)
        after = self._read("main", f"{GROUP}/u10", probe)
        f = FailedJob(
            error=error,
            fail_chunk=fail_chunk,
            head_before=head,
            head_after=self.repo.resolve("main"),
            data_untouched=bool(np.array_equal(before, after, equal_nan=True)),
            open_sessions=len(self.repo.list_sessions("main")),
        )
        self.say.failed_job(f)
        return f

    def merge(self) -> MergeOutcome:
        """Part 5: a fix made on a branch from the release tag, merged back into main (a
        three-way merge: main has moved on since the tag)."""
        self.say.section("A fix on a release branch, merged into main")
        branch = "v1.0-fix"
        self.repo.create_branch(branch, at="v1.0")
        lc, oc = self.grid.lat_chunk, self.grid.lon_chunk
        fix = WriterJob(
            "release-team", f"{GROUP}/v10", (slice(0, 24), slice(0, lc), slice(0, oc)), 0.25
        )
        session = self.repo.create_session(branch, message="v10 fix", author=fix.name)
        apply(session, fix)
        fixed = session.commit(f"Correct {fix.describe()} on the release")
        self.say.say(f"  on {branch} (from v1.0): {fix.describe()} += {fix.delta} -> {fixed[:12]}")
        merged = self.repo.merge(branch, target="main", author=AUTHOR)
        self.written_bytes += region_bytes(fix.region, self.grid.shape)
        m = MergeOutcome(
            branch=branch,
            branch_commit=fixed,
            merge_commit=merged,
            main_has_change=bool(
                np.array_equal(
                    self._read("main", fix.array, fix.region),
                    self._read(branch, fix.array, fix.region),
                )
            ),
        )
        self.say.merge(m)
        return m

    def audit(self, spark: SparkSession) -> AuditOutcome:
        """Part 6: write-audit-publish. Checks guard main, and main takes changes only
        through an approved pull request. A day reprocessed upstream is written to a branch
        by Spark; one tile came in kelvin, the range check on t2m fails and the merge is
        refused; the day is written again on its branch, the checks pass, and a reviewer's
        approval publishes it."""
        self.say.section("Write, audit, publish: checks and a pull request")
        repo = self.repo
        rules = {
            "t2m-physical": checks.ValueRange(T2M, min=-90.0, max=60.0),
            "t2m-complete": checks.MaxNaNFraction(T2M, 0.0),
            "layout-kept": checks.SchemaUnchanged(T2M),
        }
        for name, check in rules.items():
            repo.add_check(name, check, branches="main")
        repo.protect_branch("main", require_pull_request=True, required_approvals=1)
        self.say.say(
            f"  checks guarding main: {', '.join(rules)}; main takes changes only through "
            "a pull request with 1 approval"
        )
        day = self.grid.days - 1
        branch = f"reprocess-{day_name(day)}"
        repo.create_branch(branch, at="main")
        reprocess = {"arrays": [T2M], "branch": branch, "revision": 2}
        title = f"Reprocessed t2m of {day_name(day)} (upstream revision 2)"
        self._ingest(spark, day, **reprocess, kelvin_chunk=0, message=title)
        pr = repo.create_pull_request(branch, target="main", title=title, author="ingest-job")
        failed = next(r for r in pr.run_checks() if not r.passed)
        pr.approve(author="data-steward")
        try:
            pr.merge(author="data-steward")
            refused = ""
        except PullRequestBlockedError as e:
            refused = e.reasons[0]
        self.say.audit_refused(pr.id, branch, failed.name, failed.message, refused)
        self._ingest(spark, day, **reprocess, message=f"{title}: tile 0 in degC")
        fix = repo.resolve(branch)
        after = {r.name: r.passed for r in pr.run_checks()}
        pr.comment("tile 0 re-read in degrees Celsius", author="ingest-job")
        pr.approve(author="data-steward")  # the approval of the new head
        merged = pr.merge(author="data-steward")
        region = (slice(24 * day, 24 * (day + 1)), *self.grid.tile_slices(0))
        has_fix = bool(
            np.array_equal(self._read("main", T2M, region), self._read(branch, T2M, region))
        )
        repo.delete_branch(branch)
        self.written_bytes += 2 * self.grid.day_bytes() // len(VARIABLES)
        a = AuditOutcome(
            checks=list(rules),
            branch=branch,
            day=day_name(day),
            pull_request=pr.id,
            failed_check=failed.name,
            failed_message=failed.message,
            merge_refused=refused,
            fix_commit=fix,
            checks_after_fix=after,
            merge_commit=merged,
            state=repo.pull_request(pr.id).state,
            main_has_fix=has_fix,
            branch_deleted=branch not in repo.list_branches(),
        )
        self.say.audit(a)
        return a

    def collect_garbage(self) -> GcOutcome:
        """Part 7: garbage collection reclaims what no commit references: the failed job's
        uploads and the conflicting writer's abandoned attempt. Nothing else writes to the
        demo's repository now, so no grace period is needed."""
        self.say.section("Garbage collection")
        before = object_bytes(self.cfg.directory)
        report = self.repo.gc(timedelta(0), full=True)
        g = GcOutcome(
            objects_deleted=report.objects_deleted,
            bytes_reclaimed=report.bytes_deleted,
            object_bytes_before=before,
            object_bytes_after=object_bytes(self.cfg.directory),
        )
        self.say.gc(g)
        return g

    def summary(self, elapsed: float) -> Summary:
        """Part 8: what the repository holds."""
        import zarr

        self.say.section("Summary")
        stats = self.repo.stats("main")
        group = zarr.open_group(self.repo.readonly_session("main").store, mode="r")
        logical = sum(a.nbytes for _, a in group.arrays()) + sum(
            a.nbytes for _, g in group.groups() for _, a in g.arrays()
        )
        s = Summary(
            commits=stats.commits,
            branches=len(self.repo.list_branches()),
            tags=len(self.repo.list_tags()),
            arrays=stats.arrays,
            chunks=stats.chunks,
            logical_bytes=logical,
            written_bytes=self.written_bytes,
            stored_bytes=stats.bytes,
            disk_bytes=disk_bytes(self.cfg.directory),
        )
        self.say.summary(s, elapsed)
        return s


def region_bytes(region: tuple[slice, ...], shape: tuple[int, ...], itemsize: int = 4) -> int:
    """Bytes of a float32 region of an array of `shape`."""
    full = region + (slice(None),) * (len(shape) - len(region))
    return itemsize * math.prod(len(range(*s.indices(n))) for s, n in zip(full, shape, strict=True))


def object_bytes(path: Path) -> int:
    """Bytes of the repository's objects in `path`: every file but the SQLite metastore."""
    return sum(
        p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and not p.name.startswith("metastore.sqlite")
    )


def disk_bytes(path: Path) -> int:
    """Bytes of every file under `path` (the demo's repository is a local directory)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(cfg: DemoConfig, narrator: Narrator | None = None) -> DemoResult:
    """The whole story on a fresh repository in `cfg.directory`; returns what happened."""
    t0 = time.perf_counter()
    say = narrator or Narrator()
    directory, replaced = prepare_directory(cfg.directory)
    cfg = replace(cfg, directory=directory)
    say.banner(str(directory), replaced)
    repo = Repo.create(directory)
    try:
        say.say(f"Created repository at {directory} (local directory + SQLite metastore)")
        story = Story(cfg, repo, say)
        dataset = story.create_dataset()
        say.say("Starting Spark...")
        spark = start_spark(cfg.master)
        try:
            days = story.ingest(spark)
            time_travel = story.history(days)
            replay = story.replay(spark)
            disjoint, overlapping, retry = story.concurrency()
            failed = story.failed_job(spark)
            merge = story.merge()
            audit = story.audit(spark)
        finally:
            spark.stop()
        gc = story.collect_garbage()
        summary = story.summary(time.perf_counter() - t0)
    finally:
        repo.close()
    say.done(str(directory))
    return DemoResult(
        directory=str(directory),
        replaced_previous_demo=replaced,
        dataset_commit=dataset,
        day_commits=days,
        time_travel=time_travel,
        replay=replay,
        disjoint_writers=disjoint,
        overlapping_writers=overlapping,
        retry=retry,
        failed_job=failed,
        merge=merge,
        audit=audit,
        gc=gc,
        summary=summary,
        elapsed_seconds=time.perf_counter() - t0,
    )
