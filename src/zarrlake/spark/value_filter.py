"""The `where` read option: a value filter that is part of the read ("t2m > 40", the grammar
of `zl.select`, the value named as the rows name it). The chunks whose statistics cannot
match are not read, and the rows are those that match, so the DataFrame is exactly the
matching rows whatever the statistics say (option `statistics`: "use", the default, or
"ignore"). It is an option of the read and not a filter Spark pushes down: Spark keeps the
read planned for one query's pushed filters for every later query of the same DataFrame
(spark/region.py), while an option is the same for every query of it."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrlake.query import check_statistics, value_names
from zarrlake.spark.arrays import ArrayInfo
from zarrlake.spark.region import Bounds
from zarrlake.vc import where as filters

log = logging.getLogger("zarrlake.spark")

WHERE, STATISTICS = "where", "statistics"


@dataclass(frozen=True)
class ValueFilter:
    """A read's value filter: `node`, and per chunk of the read's grid (C order) whether
    to read it (`keep`; None: every one)."""

    node: filters.Node
    keep: np.ndarray | None


def value_filter(
    options: Mapping[str, str],
    repo: Any,
    info: ArrayInfo,
    commit: str,
    bounds: Bounds,
    chunks: tuple[int, ...],
) -> ValueFilter | None:
    """The `where` and `statistics` options of a read of `info` at `commit` within element
    `bounds`, whose statistics are kept per chunk of shape `chunks` (the array's, or its
    shards' inner chunks); None without `where`. Logs at INFO how many chunks the
    statistics skip."""
    given = {str(k).lower(): v for k, v in options.items()}
    use = check_statistics(given.get(STATISTICS, "use"), "option 'statistics'") == "use"
    text = given.get(WHERE)
    if text is None:
        return None
    node = filters.parse(str(text), value_names(info.path, info.dims))
    if not use:
        return ValueFilter(node, None)
    ranges = [
        np.arange(lo // u, -(-hi // u), dtype=np.int64) if hi > lo else np.zeros(0, np.int64)
        for (lo, hi), u in zip(bounds, info.unit, strict=True)
    ]
    may = _may_match(node, repo, info, commit, chunks)
    keep = may[np.ix_(*ranges)].reshape(-1) if ranges else may.reshape(-1)
    if "PYSPARK_SPARK_SESSION_UUID" in os.environ and not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)  # a planning worker whose logs Spark keeps (worker
        # logging on): the line goes to spark.tvf.python_worker_logs()
    log.info(
        "zarrlake read of %s at %s where %r: chunk statistics skip %d of %d chunks",
        info.path,
        commit[:12],
        str(text),
        int(keep.size - keep.sum()),
        int(keep.size),
    )
    return ValueFilter(node, keep)


def _may_match(
    node: filters.Node, repo: Any, info: ArrayInfo, commit: str, chunks: tuple[int, ...]
) -> np.ndarray:
    """Per unit of the read (its grid's shape): whether `node` may match a value in it.
    The statistics are kept per chunk: a unit of several (a whole shard, option
    grid=shards) may match if one of its chunks may."""
    table = repo.chunk_stats(info.path, commit)
    chunk_grid = tuple(-(-s // c) for s, c in zip(info.shape, chunks, strict=True))
    may = node.may_match(filters.Chunks.of_table(table)).reshape(chunk_grid)
    per = [u // c for u, c in zip(info.unit, chunks, strict=True)]
    if all(p == 1 for p in per):
        return may
    padded = np.zeros([u * p for u, p in zip(info.unit_grid, per, strict=True)], bool)
    padded[tuple(slice(0, g) for g in chunk_grid)] = may
    split = padded.reshape([x for u, p in zip(info.unit_grid, per, strict=True) for x in (u, p)])
    return split.any(axis=tuple(range(1, 2 * len(per), 2)))
