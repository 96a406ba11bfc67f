"""Structured Streaming sink: `df.writeStream.format("zarrlake")`, one commit per micro-batch,
exactly once; with option `append_dim`, each micro-batch grows the array.

Spark runs a stream's tasks on a writer it planned once, so the driver keeps one open session
per stream, tagged by its message, for the next micro-batch: tasks find it and write into it;
commit(batch) commits it with the stream id and batch id in the commit's metadata and opens
the next one. A batch Spark replays after a crash (committed here, not yet in Spark's
checkpoint) finds its batch id already on the branch and is abandoned: no second commit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from zarrlake.errors import InvalidInputError, NotFoundError, SessionClosedError
from zarrlake.spark import options as opts
from zarrlake.spark.arrays import open_array
from zarrlake.spark.errors import keep_conflicts
from zarrlake.spark.targets import Targets
from zarrlake.spark.writer import WrittenChunks, finish, write_batches

STREAM, BATCH = "zarrlake.stream", "zarrlake.batch"
SCAN_COMMITS = 10_000
"""How far back a commit looks for the stream's last batch (micro-batches commit in order)."""


def stream_id(options) -> str:
    """The id a streaming query's commits are recorded under: `stream_id`, else its checkpoint
    location."""
    given = {k.lower(): v for k, v in dict(options).items()}
    value = given.get("stream_id") or given.get("checkpointlocation") or given.get("path")
    if not value:
        raise InvalidInputError(
            "the zarrlake streaming sink needs option 'checkpointLocation' (or 'stream_id') to "
            "recognise batches it already committed"
        )
    return str(value)


class ZarrLakeStreamWriter(DataSourceStreamArrowWriter):
    """Created by Spark on the driver when the query starts and again for each commit."""

    def __init__(self, repo: opts.RepoOptions, branch: str, targets: Targets, sid: str) -> None:
        self.repo_options = repo
        self.branch = branch
        self.targets = targets
        self.sid = sid
        self.tag = f"zarrlake stream {sid}"
        self.open_session()

    def _repo(self):  # -> zarrlake.Repo
        return self.repo_options.open()

    def _pending(self, repo):  # -> SessionInfo | None
        mine = [s for s in repo.list_sessions(self.branch) if s.message == self.tag]
        return mine[-1] if mine else None

    def open_session(self) -> None:
        """Make sure the next micro-batch has a session to write into (driver only)."""
        repo = self._repo()
        if self._pending(repo) is None:
            session = repo.create_session(self.branch, message=self.tag)
            # handed over to the executors, which find it by its message: reading its id
            # stores its record now (a new session stores it at its first write or hand-over)
            _ = session.id

    # executors --------------------------------------------------------------------------

    # pyspark's own DataSourceStreamArrowWriter.write narrows the base's Iterator[Row]
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenChunks:  # type: ignore[override]
        """Write one task's rows of a micro-batch into the batch's open session."""
        repo = self._repo()
        pending = self._pending(repo)
        if pending is None:
            raise NotFoundError(
                f"no open session for stream {self.sid!r}; restart the stream from its checkpoint"
            )
        session = repo.join_session(pending.id)
        arrays = {i.path: open_array(session, i.path, ref=self.branch) for i in self.targets.infos}
        return write_batches(session, self.tag, arrays, self.targets, iterator)

    # driver -----------------------------------------------------------------------------

    def last_batch(self, repo) -> int | None:
        """The newest batch id of this stream committed on the branch, if any."""
        for commit in repo.log(self.branch, limit=SCAN_COMMITS):
            meta = commit.metadata or {}
            if meta.get(STREAM) == self.sid:
                return int(meta[BATCH])
        return None

    @keep_conflicts
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit the micro-batch's session (once: a replayed batch is abandoned).

        The commit records the stream id and batch id, so a restarted query recognises batches it
        already committed; a new session is opened for the next batch either way."""
        repo = self._repo()
        pending = self._pending(repo)
        if pending is None:
            raise NotFoundError(
                f"no open session for stream {self.sid!r} batch {batchId}"
                "; restart the stream from its checkpoint"
            )
        session = repo.join_session(pending.id)
        done = self.last_batch(repo)
        try:
            if done is not None and done >= batchId:
                session.abandon()  # a replay of a batch already committed
            else:
                finish(session, self.targets, self.tag, messages)
                session.commit(
                    f"stream {self.sid} batch {batchId}",
                    metadata={STREAM: self.sid, BATCH: str(batchId)},
                    allow_empty=True,  # an empty micro-batch still records its progress
                )
        except BaseException:
            with contextlib.suppress(SessionClosedError):
                session.abandon()
            raise
        finally:
            self.open_session()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abandon the micro-batch's session and open a fresh one for the retry."""
        repo = self._repo()
        pending = self._pending(repo)
        if pending is not None:
            with contextlib.suppress(SessionClosedError, NotFoundError):
                repo.join_session(pending.id).abandon()
        self.open_session()
