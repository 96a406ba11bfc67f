"""The Structured Streaming sink: one commit per micro-batch, and a batch Spark replays
after losing its checkpoint entry makes no second commit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import zarrlake as zl


def _drop_file(folder, name: str, x: int) -> None:
    rows = [json.dumps({"x": x, "y": y, "v": x * 10.0 + y}) for y in range(10)]
    (folder / name).write_text("\n".join(rows) + "\n")


def _run(spark, source, loc: str, checkpoint: str) -> None:
    df = (
        spark.readStream.schema("x long, y long, v double")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    query = (
        df.writeStream.format("zarrlake")
        .option("repo", loc)
        .option("array", "s/v")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None


@pytest.mark.slow
def test_stream_commits_each_batch_once(spark, tmp_path):
    loc = str(tmp_path / "repo")
    repo = zl.Repo.create(loc)
    s = repo.create_session("main")
    zarr.create_array(
        s.store, name="s/v", shape=(4, 10), chunks=(1, 10), dtype="f8", dimension_names=["x", "y"]
    )
    s.commit("setup")
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    _drop_file(source, "a.json", 0)
    _drop_file(source, "b.json", 1)
    _run(spark, source, loc, str(checkpoint))

    log = repo.log()
    stream = [c for c in log if c.metadata.get("zarrlake.stream")]
    assert [c.metadata["zarrlake.batch"] for c in stream] == ["1", "0"]
    assert {c.metadata["zarrlake.stream"] for c in stream} == {str(checkpoint)}
    expected = np.zeros((4, 10))
    expected[:2] = np.arange(2)[:, None] * 10.0 + np.arange(10)
    read = zarr.open_array(repo.readonly_session().store, path="s/v", mode="r")
    np.testing.assert_array_equal(read[:], expected)

    # the driver "died" after zarrlake committed batch 1 but before Spark recorded it
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    _run(spark, source, loc, str(checkpoint))
    assert (checkpoint / "commits" / "1").exists()  # Spark ran batch 1 again...
    assert [c.id for c in repo.log()] == [c.id for c in log]  # ...and it made no commit
    read = zarr.open_array(repo.readonly_session().store, path="s/v", mode="r")
    np.testing.assert_array_equal(read[:], expected)

    _drop_file(source, "c.json", 2)  # and the stream goes on
    _run(spark, source, loc, str(checkpoint))
    head = repo.log(limit=1)[0]
    assert head.metadata["zarrlake.batch"] == "2"
    expected[2] = 20.0 + np.arange(10)
    read = zarr.open_array(repo.readonly_session().store, path="s/v", mode="r")
    np.testing.assert_array_equal(read[:], expected)
