"""The demo's Spark side: a quiet local Spark session, and one ingest job per day through
the `zarrlake` data source (rows generated on the executors)."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from zarrlake.demo.data import Grid, block_rows, day_name

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

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

ROW_SCHEMA = "time bigint, lat bigint, lon bigint, t2m float, u10 float, v10 float"


def start_spark(master: str = "local[*]") -> SparkSession:
    """A local Spark session with the "zarrlake" data source registered and logging quiet."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    log_config = Path(tempfile.gettempdir()) / f"zarrlake-demo-log4j2-{os.getuid()}.properties"
    log_config.write_text(QUIET_LOG4J)
    from pyspark.sql import SparkSession

    import zarrlake.spark

    spark = (
        SparkSession.builder.master(master)
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
    zarrlake.spark.register(spark)
    return spark


def day_frame(
    spark: SparkSession,
    grid: Grid,
    day: int,
    fail_chunk: int = -1,
    revision: int = 0,
    kelvin_chunk: int = -1,
) -> DataFrame:
    """A DataFrame with one day of rows (of upstream `revision`), generated on the
    executors, one spatial chunk per input row. With `fail_chunk`, the task generating that
    chunk raises (after the others have started writing); with `kelvin_chunk`, that chunk's
    upstream file gives t2m in kelvin instead of degrees Celsius (a bad value, no error)."""

    def generate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        for batch in batches:
            for chunk in batch.column("id").to_pylist():
                assert chunk is not None  # (spark.range has no nulls)
                if chunk == fail_chunk:
                    raise RuntimeError(f"corrupt upstream file for spatial chunk {chunk}")
                rows = block_rows(grid, day, chunk, revision)
                if chunk == kelvin_chunk:
                    rows["t2m"] = rows["t2m"] + np.float32(273.15)
                yield pa.RecordBatch.from_pydict(rows)

    n = grid.spatial_chunks
    return spark.range(0, n, numPartitions=n).mapInArrow(generate, ROW_SCHEMA)


def ingest_day(
    spark: SparkSession,
    location: str,
    arrays: list[str],
    grid: Grid,
    day: int,
    *,
    branch: str = "main",
    fail_chunk: int = -1,
    revision: int = 0,
    kelvin_chunk: int = -1,
    allow_empty: bool = False,
    message: str | None = None,
) -> None:
    """One Spark job: the day's rows into every array of `arrays`, as one commit (refused
    if it changes nothing, unless `allow_empty`), by default "Ingest <day>"."""
    (
        day_frame(spark, grid, day, fail_chunk, revision, kelvin_chunk)
        .write.format("zarrlake")
        .option("repo", location)
        .option("branch", branch)
        .option("arrays", ",".join(arrays))
        .option("message", message or f"Ingest {day_name(day)}")
        .option("allow_empty", str(allow_empty).lower())
        .mode("append")
        .save()
    )


def job_error(error: BaseException) -> str:
    """The Python error a failed Spark job's task raised, from the job's long message."""
    for line in str(error).splitlines():
        line = line.strip()
        if line.startswith(("RuntimeError:", "ValueError:", "zarrlake.")):
            return line
        if "zarrlake.errors." in line:
            return line[line.index("zarrlake.errors.") :]
    return type(error).__name__
