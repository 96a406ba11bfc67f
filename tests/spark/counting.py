"""A "zarrlake" data source variant for tests that logs every chunk its tasks read to the
file named by option `chunk_log`, so a test can count chunk reads done in the executors.
Registered with Spark by value (see register_counting), so workers need not import tests."""

from __future__ import annotations

import fcntl

from pyspark import cloudpickle

from zarrlake.spark.reader import ZarrLakeReader
from zarrlake.spark.source import ZarrLakeSource


class CountingReader(ZarrLakeReader):
    log_path: str = ""

    def read_blocks(self, array, chunks, boxes):
        with open(self.log_path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("".join(",".join(map(str, chunk)) + "\n" for chunk in chunks))
        return super().read_blocks(array, chunks, boxes)


class CountingSource(ZarrLakeSource):
    @classmethod
    def name(cls) -> str:
        return "zarrlake_counting"

    def reader(self, schema):
        base = super().reader(schema)
        reader = CountingReader.__new__(CountingReader)
        reader.__dict__.update(base.__dict__)
        reader.log_path = self.options["chunk_log"]
        return reader


def register_counting(spark) -> None:
    import sys

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(CountingSource)


def logged_chunks(path) -> list[tuple[int, ...]]:
    with open(path) as f:
        return [tuple(int(p) for p in line.split(",")) for line in f.read().split()]
