"""`zarrlake demo`: the product's story told with real work on a local repository.

A deterministic, weather-like dataset (hourly 2 m temperature and 10 m wind on a regional
grid) is ingested by one Spark job per day through the `zarrlake` data source, one commit
per day; then tags and time travel, concurrent writers with and without conflicts, a Spark
job that fails half-way, and a summary of what is stored.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from zarrlake.errors import ConflictError, InvalidInputError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from zarrlake.repo import Repo

console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)

GROUP = "weather"
VARIABLES = {  # name -> (long name, units)
    "t2m": ("2 metre temperature", "degC"),
    "u10": ("10 metre eastward wind", "m s-1"),
    "v10": ("10 metre northward wind", "m s-1"),
}
START = date(2025, 1, 1)
SEED = 20250101
LAT_RANGE = (35.0, 60.0)  # a European-sized regional grid
LON_RANGE = (-10.0, 30.0)


@dataclass(frozen=True)
class DemoConfig:
    """What the demo builds, and how big; the defaults are the full-size story."""

    directory: Path
    days: int = 30
    lat: int = 144
    lon: int = 180
    lat_chunk: int = 36
    lon_chunk: int = 45
    master: str = "local[*]"

    @classmethod
    def sized(cls, directory: Path, days: int = 30, small: bool = False) -> DemoConfig:
        if days < 3:
            raise InvalidInputError(f"the demo needs at least 3 days, not {days}")
        if small:
            return cls(Path(directory), days, lat=32, lon=40, lat_chunk=16, lon_chunk=20)
        return cls(Path(directory), days)

    @property
    def hours(self) -> int:
        return self.days * 24

    @property
    def grid(self) -> tuple[int, int]:
        """Spatial chunks along (lat, lon)."""
        return -(-self.lat // self.lat_chunk), -(-self.lon // self.lon_chunk)

    @property
    def spatial_chunks(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def arrays(self) -> list[str]:
        return [f"{GROUP}/{v}" for v in VARIABLES]

    def raw_bytes(self) -> int:
        return self.hours * self.lat * self.lon * 4 * len(VARIABLES)


# the dataset --------------------------------------------------------------------------


def coordinates(cfg: DemoConfig) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.linspace(*LAT_RANGE, cfg.lat, dtype="f8"),
        np.linspace(*LON_RANGE, cfg.lon, dtype="f8"),
    )


def generate_block(cfg: DemoConfig, day: int, chunk: int) -> dict[str, np.ndarray]:
    """One day (24 hours) of every variable on spatial chunk `chunk`, each (24, nlat, nlon).

    Smooth fields (latitude gradient, diurnal cycle, a travelling synoptic wave) plus noise
    seeded by (day, chunk): the same call gives the same bytes on any machine.
    """
    ci, cj = divmod(chunk, cfg.grid[1])
    lat_sl = slice(ci * cfg.lat_chunk, min((ci + 1) * cfg.lat_chunk, cfg.lat))
    lon_sl = slice(cj * cfg.lon_chunk, min((cj + 1) * cfg.lon_chunk, cfg.lon))
    lats, lons = coordinates(cfg)
    lat = lats[lat_sl][None, :, None]
    lon = lons[lon_sl][None, None, :]
    hour = np.arange(24, dtype="f8")[:, None, None] + 24 * day
    rng = np.random.default_rng([SEED, day, chunk])
    shape = (24, lat.shape[1], lon.shape[2])
    wave = np.sin(2 * np.pi * (lon / 15.0 - hour / 96.0)) * np.cos(2 * np.pi * lat / 20.0)
    t2m = (
        22.0
        - 0.7 * (lat - LAT_RANGE[0])
        + 5.0 * np.sin(2 * np.pi * (hour % 24 - 9) / 24) * np.cos(np.radians(lat))
        + 4.0 * wave
        - 0.1 * day
        + rng.normal(0.0, 0.3, shape)
    )
    u10 = 6.0 * np.cos(2 * np.pi * (lat - LAT_RANGE[0]) / 25.0) + 3.0 * wave
    u10 = u10 + rng.normal(0.0, 0.8, shape)
    v10 = 3.0 * np.cos(2 * np.pi * (lon / 15.0 - hour / 96.0)) + rng.normal(0.0, 0.8, shape)
    return {
        "t2m": np.broadcast_to(t2m, shape).astype("f4"),
        "u10": np.broadcast_to(u10, shape).astype("f4"),
        "v10": np.broadcast_to(v10, shape).astype("f4"),
    }


def block_batch(cfg: DemoConfig, day: int, chunk: int) -> pa.RecordBatch:
    """The rows of one block as an Arrow batch: (time, lat, lon) indices and the values."""
    import pyarrow as pa

    values = generate_block(cfg, day, chunk)
    ci, cj = divmod(chunk, cfg.grid[1])
    shape = values["t2m"].shape
    t, y, x = np.indices(shape, dtype="i8").reshape(3, -1)
    cols = {
        "time": t + 24 * day,
        "lat": y + ci * cfg.lat_chunk,
        "lon": x + cj * cfg.lon_chunk,
        **{name: v.reshape(-1) for name, v in values.items()},
    }
    return pa.RecordBatch.from_pydict(cols)


ROW_SCHEMA = "time bigint, lat bigint, lon bigint, t2m float, u10 float, v10 float"


def day_frame(spark: SparkSession, cfg: DemoConfig, day: int, fail_chunk: int = -1) -> DataFrame:
    """A DataFrame with one day of rows, generated on the executors, one spatial chunk per
    input row. With `fail_chunk`, the task generating that chunk raises (after the others
    have started writing)."""

    def generate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for chunk in batch.column("id").to_pylist():
                if chunk == fail_chunk:
                    raise RuntimeError(f"corrupt upstream file for spatial chunk {chunk}")
                yield block_batch(cfg, day, chunk)

    n = cfg.spatial_chunks
    return spark.range(0, n, numPartitions=n).mapInArrow(generate, ROW_SCHEMA)


# the story ---------------------------------------------------------------------------


def day_name(day: int) -> str:
    return (START + timedelta(days=day)).isoformat()


def prepare_directory(path: Path) -> Path:
    """A fresh directory for the demo; an old demo repository there is removed first."""
    path = path.expanduser().absolute()
    if path.exists():
        if path.is_file():
            raise InvalidInputError(f"{path} is a file; choose another --dir")
        entries = list(path.iterdir())
        if entries and not (path / "zarrlake.json").exists():
            raise InvalidInputError(
                f"{path} exists and is not a zarrlake repository; not wiping it "
                "(choose another --dir or remove it yourself)"
            )
        if entries:
            console.print(f"[yellow]Removing the previous demo repository at {path}[/]")
        shutil.rmtree(path)
    return path


QUIET_LOG4J = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""
"""Spark's log: only fatal errors. The demo's expected task failure would otherwise print
pages of Java stack traces; what went wrong reaches Python as the job's exception."""


def start_spark(cfg: DemoConfig) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    log_config = Path(tempfile.gettempdir()) / f"zarrlake-demo-log4j2-{os.getuid()}.properties"
    log_config.write_text(QUIET_LOG4J)
    from pyspark.sql import SparkSession

    import zarrlake as zl

    spark = (
        SparkSession.builder.master(cfg.master)
        .appName("zarrlake-demo")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_config}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("FATAL")
    zl.spark.register(spark)
    return spark


def create_dataset(repo: Repo, cfg: DemoConfig) -> str:
    """Commit the empty arrays with their coordinates: the layout every day fills in."""
    import zarr

    session = repo.create_session(message="Create the weather dataset", author="demo")
    root = zarr.open_group(session.store, mode="a")
    group = root.create_group(
        GROUP,
        attributes={"title": "zarrlake demo: hourly near-surface weather", "source": "synthetic"},
    )
    dims = ["time", "lat", "lon"]
    for name, (long_name, units) in VARIABLES.items():
        group.create_array(
            name,
            shape=(cfg.hours, cfg.lat, cfg.lon),
            chunks=(24, cfg.lat_chunk, cfg.lon_chunk),
            dtype="f4",
            fill_value=np.nan,
            dimension_names=dims,
            attributes={"long_name": long_name, "units": units},
        )
    lats, lons = coordinates(cfg)
    for name, values, units in (("lat", lats, "degrees_north"), ("lon", lons, "degrees_east")):
        arr = group.create_array(
            name,
            shape=values.shape,
            dtype="f8",
            dimension_names=[name],
            attributes={"units": units},
        )
        arr[:] = values
    hours = group.create_array(
        "time",
        shape=(cfg.hours,),
        dtype="i8",
        dimension_names=["time"],
        attributes={"units": f"hours since {START.isoformat()} 00:00:00", "calendar": "standard"},
    )
    hours[:] = np.arange(cfg.hours)
    return session.commit("Create the weather dataset")


def ingest_day(spark: SparkSession, cfg: DemoConfig, day: int, fail_chunk: int = -1) -> None:
    """One Spark job: the day's rows into all three arrays, as one commit."""
    (
        day_frame(spark, cfg, day, fail_chunk)
        .write.format("zarrlake")
        .option("repo", str(cfg.directory))
        .option("branch", "main")
        .option("arrays", ",".join(cfg.arrays))
        .option("message", f"Ingest {day_name(day)}")
        .mode("append")
        .save()
    )


def section(title: str) -> None:
    console.print()
    console.print(Rule(f"[bold]{title}[/]", align="left"))


def step_ingest(spark: SparkSession, repo: Repo, cfg: DemoConfig, tag_after: int) -> dict:
    """Part 1: a Spark job per day, one commit each; the release tag after `tag_after` days."""
    section(f"1. Ingest {cfg.days} days with Spark, one job and one commit per day")
    console.print(
        f"Grid {cfg.lat} x {cfg.lon} (lat x lon), hourly, variables {', '.join(VARIABLES)}; "
        f"chunks (24, {cfg.lat_chunk}, {cfg.lon_chunk}); "
        f"{cfg.days * 24 * cfg.lat * cfg.lon:,} rows, {cfg.raw_bytes() / 1e6:,.0f} MB of float32 "
        f"in total. Spark master {cfg.master}."
    )
    commits: dict[int, str] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("ingesting days", total=cfg.days)
        for day in range(cfg.days):
            t0 = time.perf_counter()
            ingest_day(spark, cfg, day)
            commits[day] = repo.resolve("main")
            progress.console.print(
                f"  {day_name(day)}: {24 * cfg.lat * cfg.lon:,} rows -> commit "
                f"[yellow]{commits[day][:12]}[/] ({time.perf_counter() - t0:.1f} s)"
            )
            if day + 1 == tag_after:
                repo.create_tag("v1.0", at=commits[day])
                progress.console.print(
                    f"  [green]tagged v1.0[/] at {commits[day][:12]} "
                    f"(the first {tag_after} days: a release for downstream users)"
                )
            progress.advance(task)
    return commits


def step_history(repo: Repo, cfg: DemoConfig, commits: dict[int, str], tag_after: int) -> None:
    """Part 2: log, a diff between two days, and a time-travel read at the tag."""
    import zarr

    from zarrlake.cli.history import print_diff

    section("2. History: log, diff, time travel")
    console.print("[bold]$ zarrlake log main --limit 5[/]")
    table = Table(box=None, header_style="bold")
    for col in ("commit", "time", "author", "message"):
        table.add_column(col)
    for c in repo.log("main", limit=5):
        table.add_row(
            f"[yellow]{c.id[:12]}[/]", f"{c.timestamp:%H:%M:%S}", c.author or "-", escape(c.message)
        )
    console.print(table)
    console.print(f"... {len(repo.log('main'))} commits on main.\n")

    a, b = 1, 2
    console.print(f"[bold]$ zarrlake diff {commits[a][:12]} {commits[b][:12]}[/]  (day {b + 1})")
    print_diff(repo.diff(commits[a], commits[b]))

    late = cfg.days - 1
    rows = slice(24 * late, 24 * late + 24)
    at_tag = zarr.open_array(repo.readonly_session("v1.0").store, path=f"{GROUP}/t2m", mode="r")
    at_main = zarr.open_array(repo.readonly_session("main").store, path=f"{GROUP}/t2m", mode="r")
    early = slice(0, 24)
    same = np.array_equal(at_tag[early], at_main[early], equal_nan=True)
    tag_late = at_tag[rows]
    main_late = at_main[rows]
    console.print(
        f"\n[bold]Time travel.[/] v1.0 was tagged after {tag_after} days; "
        f"{cfg.days - tag_after} more days landed since."
    )
    console.print(
        f"  {day_name(0)} at v1.0 and at main: "
        f"{'byte-identical' if same else '[red]DIFFERENT[/]'} "
        f"(mean t2m {np.nanmean(at_tag[early]):.2f} degC)"
    )
    console.print(
        f"  {day_name(late)} at v1.0: "
        f"{'not yet ingested (all NaN)' if np.isnan(tag_late).all() else 'has data'}; "
        f"at main: mean t2m {np.nanmean(main_late):.2f} degC"
    )
    if not same or not np.isnan(tag_late).all() or np.isnan(main_late).any():
        raise RuntimeError("time travel check failed: the tag does not show the tagged data")


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def step_replay(spark: SparkSession, repo: Repo, cfg: DemoConfig) -> None:
    """A retried pipeline re-ingests a day with the same bytes: a commit, no new data."""
    before_disk = disk_bytes(cfg.directory / "chunks")
    before = repo.resolve("main")
    ingest_day(spark, cfg, 1)
    after = repo.resolve("main")
    grown = disk_bytes(cfg.directory / "chunks") - before_disk
    changed = repo.diff(before, after)
    console.print(
        f"\n[bold]Idempotent re-run.[/] The job for {day_name(1)} ran again (a retried "
        f"pipeline): commit {after[:12]} landed, diff against the previous head: "
        f"{'no changes' if changed.is_empty() else changed.to_json()}, "
        f"chunk bytes added on disk: {grown} (identical chunks are stored once)."
    )


def _writer(
    location: str,
    region: tuple[slice, ...],
    delta: float,
    name: str,
    staged: threading.Barrier,
    go: threading.Event | None,
    done: threading.Event | None,
    results: dict,
) -> None:
    """One independent client: its own Repo handle and session; adjust a region of t2m."""
    import zarr

    from zarrlake.repo import Repo

    repo = Repo.open(location)
    try:
        session = repo.create_session(message=f"{name}: correct t2m", author=name)
        arr = zarr.open_array(session.store, path=f"{GROUP}/t2m")
        arr[region] = arr[region] + np.float32(delta)
        staged.wait(timeout=60)
        if go is not None:
            go.wait(timeout=60)
        try:
            results[name] = ("landed", session.commit(f"{name}: bias-correct t2m"))
        except ConflictError as e:
            results[name] = ("conflict", e)
            session.abandon()  # its staged writes are kept until abandoned; retry afresh
    except Exception as e:  # reported by the main thread
        results[name] = ("error", e)
    finally:
        if done is not None:
            done.set()


def _run_pair(location: str, jobs: list[tuple], ordered: bool) -> dict:
    """Run two writers in threads. Both stage their writes before either commits; with
    `ordered`, the second commits only after the first finished."""
    staged = threading.Barrier(len(jobs))
    first_done = threading.Event() if ordered else None
    results: dict = {}
    threads = []
    for i, (name, region, delta) in enumerate(jobs):
        go = first_done if ordered and i == 1 else None
        done = first_done if ordered and i == 0 else None
        args = (location, region, delta, name, staged, go, done, results)
        threads.append(threading.Thread(target=_writer, args=args, name=name))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, (status, value) in results.items():
        if status == "error":
            raise RuntimeError(f"writer {name} failed: {value}") from value
    return results


def step_concurrency(repo: Repo, cfg: DemoConfig) -> None:
    """Part 3: concurrent writers; disjoint chunks both land, overlapping chunks conflict."""
    import zarr

    section("3. Concurrent writers, each with its own session")
    location = str(cfg.directory)
    lc, oc = cfg.lat_chunk, cfg.lon_chunk
    day = slice(0, 24)
    results = _run_pair(
        location,
        [
            ("north-station-team", (day, slice(0, lc), slice(None)), 0.5),
            ("south-station-team", (day, slice(lc, 2 * lc), slice(None)), -0.3),
        ],
        ordered=False,
    )
    for name, rows in (("north-station-team", f"0:{lc}"), ("south-station-team", f"{lc}:{2 * lc}")):
        status, value = results[name]
        console.print(f"  {name}: t2m[0:24, {rows}, :] -> {status} {value[:12]}")
    if any(s != "landed" for s, _ in results.values()):
        raise RuntimeError("non-overlapping writers should both land")
    console.print(
        "  [green]Both landed[/]: the second commit found the branch moved, saw no overlapping "
        "chunk in the first one's change set, and rebased onto it."
    )

    day2 = slice(24, 48)
    a_region = (day2, slice(0, lc + lc // 2), slice(0, oc))  # chunks (1, 0, 0) and (1, 1, 0)
    b_region = (day2, slice(lc, 2 * lc), slice(0, oc))  # chunk (1, 1, 0)
    results = _run_pair(
        location,
        [("writer-A", a_region, 1.0), ("writer-B", b_region, 2.0)],
        ordered=True,
    )
    status_a, commit_a = results["writer-A"]
    status_b, error = results["writer-B"]
    console.print(f"  writer-A: t2m[24:48, 0:{lc + lc // 2}, 0:{oc}] -> {status_a} {commit_a[:12]}")
    if status_b != "conflict":
        raise RuntimeError(f"overlapping writer B should conflict, got {status_b}")
    console.print(f"  writer-B: t2m[24:48, {lc}:{2 * lc}, 0:{oc}] -> [red]ConflictError[/]")
    for c in error.conflicts:
        console.print(f"      {escape(str(c))}")
    retry = repo.create_session(message="writer-B retry", author="writer-B")
    arr = zarr.open_array(retry.store, path=f"{GROUP}/t2m")
    arr[b_region] = arr[b_region] + np.float32(2.0)
    landed = retry.commit("writer-B: bias-correct t2m (retried from the new head)")
    console.print(
        f"  writer-B retried from the new head {retry.base_commit[:12]}: landed {landed[:12]} "
        "(its change now applies on top of A's)"
    )


def step_failed_job(spark: SparkSession, repo: Repo, cfg: DemoConfig) -> None:
    """Part 4: a Spark job whose task raises half-way leaves no trace on the branch."""
    import zarr

    section("4. A Spark job that fails half-way")
    head = repo.resolve("main")
    day = 2
    probe = (slice(24 * day, 24 * day + 24), slice(None), slice(None))
    before = zarr.open_array(repo.readonly_session("main").store, path=f"{GROUP}/u10")[probe]
    fail_chunk = cfg.spatial_chunks // 2
    console.print(
        f"Re-ingesting {day_name(day)} with a task that raises on spatial chunk {fail_chunk} "
        f"(of {cfg.spatial_chunks}) after other tasks have written their chunks..."
    )
    try:
        ingest_day(spark, cfg, day, fail_chunk=fail_chunk)
    except Exception as e:
        reason = next(
            (ln.strip() for ln in str(e).splitlines() if ln.startswith("RuntimeError: corrupt")),
            type(e).__name__,
        )
        console.print(f"  the job failed: [red]{escape(reason)}[/]")
    else:
        raise RuntimeError("the failing job succeeded")
    now = repo.resolve("main")
    after = zarr.open_array(repo.readonly_session("main").store, path=f"{GROUP}/u10")[probe]
    open_sessions = repo.list_sessions("main")
    untouched = now == head and np.array_equal(before, after, equal_nan=True)
    console.print(
        f"  main is still at {now[:12]} ({'unchanged' if now == head else '[red]MOVED[/]'}), "
        f"the day's data is {'untouched' if untouched else '[red]CHANGED[/]'}, "
        f"open sessions left behind: {len(open_sessions)} (the job's session was abandoned)"
    )
    if not untouched or open_sessions:
        raise RuntimeError("the failed job left a trace on main")


@dataclass
class Summary:
    commits: int
    branches: int
    tags: int
    arrays: int
    chunks: int
    logical_bytes: int
    committed_bytes: int
    unique_bytes: int
    disk_bytes: int
    chunk_object_bytes: int


def summarize(repo: Repo, cfg: DemoConfig) -> Summary:
    """Count what the history holds: bytes committed (every chunk each commit wrote) versus
    unique chunk bytes referenced versus bytes on disk."""
    import json

    from zarrlake.format.changes import WRITE, ChangeSet
    from zarrlake.format.snapshot import SnapshotRoot, is_meta_key
    from zarrlake.view import SnapshotView

    objects = repo.objects
    committed = 0
    unique: dict[bytes, int] = {}
    log = repo.log("main")
    for c in log:
        rec = objects.commit(c.id)
        view = SnapshotView(objects, objects.read(SnapshotRoot, rec.snapshot), rec.snapshot)
        cs = objects.read(ChangeSet, rec.changes)
        for key, op in zip(cs.keys.tolist(), cs.ops.tolist(), strict=True):
            k = key.decode()
            if op != WRITE or is_meta_key(k):
                continue
            ref = view.get(k)
            if ref is not None:
                committed += ref.length
                unique[ref.digest] = ref.length
    head = repo.readonly_session("main").view.root
    arrays = [json.loads(d) for k, d in head.meta.items() if json.loads(d)["node_type"] == "array"]
    logical = sum(math.prod(a["shape"]) * np.dtype(a["data_type"]).itemsize for a in arrays)
    return Summary(
        commits=len(log),
        branches=len(repo.list_branches()),
        tags=len(repo.list_tags()),
        arrays=len(arrays),
        chunks=head.ranges.total(),
        logical_bytes=logical,
        committed_bytes=committed,
        unique_bytes=sum(unique.values()),
        disk_bytes=disk_bytes(cfg.directory),
        chunk_object_bytes=disk_bytes(cfg.directory / "chunks"),
    )


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def step_summary(repo: Repo, cfg: DemoConfig, elapsed: float) -> Summary:
    section("5. Summary")
    s = summarize(repo, cfg)
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = [
        ("commits on main", f"{s.commits}"),
        ("branches / tags", f"{s.branches} / {s.tags}"),
        ("arrays", f"{s.arrays}"),
        ("chunks in main", f"{s.chunks:,}"),
        ("array data, uncompressed", mb(s.logical_bytes)),
        ("chunk bytes written by all commits", mb(s.committed_bytes)),
        ("unique chunk bytes (deduplicated)", mb(s.unique_bytes)),
        (
            "deduplication",
            f"{s.committed_bytes / s.unique_bytes:.2f}x" if s.unique_bytes else "-",
        ),
        ("bytes on disk (objects + metastore)", mb(s.disk_bytes)),
        ("  of which chunk objects", mb(s.chunk_object_bytes)),
        ("wall time", f"{elapsed:.0f} s"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    console.print(
        "[dim]Chunk objects on disk can exceed the unique bytes referenced: the failed job's "
        "uploads stay unreferenced until garbage collection.[/]"
    )
    console.print(
        Panel(
            f"Repository: [bold]{cfg.directory}[/] (objects + metastore.sqlite)\n"
            f"Explore it:  zarrlake -r {cfg.directory} log --limit 5\n"
            f"             zarrlake -r {cfg.directory} ls main\n"
            f"             zarrlake -r {cfg.directory} diff v1.0 main\n"
            f'             zarrlake -r {cfg.directory} cat v1.0 {GROUP}/t2m --slice "0,0:4,0:4"',
            title="done",
            expand=False,
        )
    )
    return s


def run(cfg: DemoConfig) -> Summary:
    """The whole story; raises if any step does not behave as the story says."""
    from zarrlake.repo import Repo

    t0 = time.perf_counter()
    directory = prepare_directory(cfg.directory)
    cfg = replace(cfg, directory=directory)
    console.print(
        Panel(
            "zarrlake: Zarr arrays with database guarantees: atomic commits, snapshot "
            "isolation, branches, tags and chunk-level conflict detection.\n"
            f"Started {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC; repository {directory}",
            title="zarrlake demo",
            expand=False,
        )
    )
    repo = Repo.create(directory)
    console.print(f"Created repository at {directory} (local directory + SQLite metastore)")
    created = create_dataset(repo, cfg)
    console.print(
        f"Committed the empty dataset layout ({GROUP}/t2m, u10, v10 + coordinates): {created[:12]}"
    )
    console.print("Starting Spark...")
    spark = start_spark(cfg)
    try:
        tag_after = max(2, (2 * cfg.days) // 3)
        commits = step_ingest(spark, repo, cfg, tag_after)
        step_history(repo, cfg, commits, tag_after)
        step_replay(spark, repo, cfg)
        step_concurrency(repo, cfg)
        step_failed_job(spark, repo, cfg)
    finally:
        spark.stop()
    return step_summary(repo, cfg, time.perf_counter() - t0)
