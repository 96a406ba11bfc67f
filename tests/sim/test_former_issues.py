"""Seeds that found library bugs the simulator listed as known issues, replayed with the
default configuration (which since their fixes no longer steers clear of them): each failed
before its fix."""

from __future__ import annotations

import pytest

from tests.simulator import Config, run
from tests.simulator.world import KNOWN_ISSUES

FORMER = {
    911: "old-targets (README: a ref at an old commit while expire or gc removes it)",
    2273: "old-targets, the seed first named for it",
    4017: "reset-after-crash (a double commit after a crash plus a reset within the lease)",
    13901: "history operations with no record a sweep sees",
    23564: "history operations with no record a sweep sees",
    2095: "gc deleted a commit a ref had dropped again during its run, by the time of its "
    "first drop (the grace period counts from the last)",
    2528: "a committer settling its last flush's uploads waited for a stalled sweep without "
    "renewing its lease (recovery could abort it while it ran)",
    577: "gc deleted a fragment registered again as a candidate since its run read it (by "
    "a collector whose lock it had taken over): the grace period counts from the latest "
    "registration (failed once keep records were fenced, which moved the interleaving)",
    1000324: "the model bound a reset's move to the first of two identical resets, then "
    "took the second's own move (after main was moved back) for a phantom",
    1122: "expire re-read the refs before the keep records after writing its markers: a "
    "reset moved main onto a doomed commit between the two reads and dropped its keep record, "
    "so neither read saw it and expire deleted the record of main's head (after the keep "
    "records' fence and islands moved the interleaving)",
    1002040: "the model bound a tag's deletion to the first of two deletions of it, then "
    "took that one's NotFoundError for a failure that happened",
    1004066: "a full gc kept a commit record registered again (by a clock ahead of the "
    "collector's) but deleted its snapshot and change set; a branch made at it then pointed "
    "at missing objects (a run keeps whole what a record it keeps names)",
    1005178: "gc expired a writer's session (a clock jump of 35 h) and dropped its staged "
    "records; the writer's read of a chunk it had flushed then returned nothing instead of "
    "its write or an error (a handle missing its own staged records raises the session's "
    "state)",
    1000050: "two expiries doomed one commit: one deleted its record while the other, "
    "having seen a keep record of an operation that then refused, took the shared marker "
    "back, leaving a commit whose parent record was gone with no marker (the deleting run "
    "and the taking-back run each put the marker back when they see the other's change)",
}


def test_no_known_issue_is_left():
    assert KNOWN_ISSUES == {}


@pytest.mark.parametrize("seed", sorted(FORMER))
def test_a_former_issue_seed_holds_every_invariant(seed):
    result = run(Config(seed))
    assert result.ok, f"{FORMER[seed]}: {result.failure}"


def test_a_page_written_again_after_a_long_stall_is_not_swept():
    """Seed 27 with a cooperative session and two writers: a writer's page put lost its
    reply, a clock jump of 30 hours came, and its retry wrote the page again while another
    process's page sweep, which had listed the page's first write, deleted it."""
    result = run(Config(27, actors=("coop", "writer", "writer", "admin")))
    assert result.ok, result.failure


def test_a_document_rebased_alike_is_left_out_of_the_rebased_change_set():
    """Seed 2878 with two collectors and three writers: a session wrote a/zarr.json as
    the commit that landed before it had, rebased, and its change set still named the
    document; a later session changing that document was judged to land over a
    metadata conflict nothing had made."""
    result = run(Config(2878, actors=("gc", "gc", "writer", "writer", "writer")))
    assert result.ok, result.failure


def test_a_dead_writers_part_rewritten_after_its_death_is_left_out_of_an_include():
    """Seed 1182 with two collectors and three writers (a gap of the model): a committer
    flushed a/c/3 and was killed inside its commit; its restarted job wrote a/c/3 again
    with other bytes and committed with unfinished='include'. The commit left the dead
    writer out as rewritten (txn/superseded.py, whatever `unfinished` chose); the model
    counted both and called the landing a missed cooperative overlap."""
    result = run(Config(1182, actors=("gc", "gc", "writer", "writer", "writer")))
    assert result.ok, result.failure


def test_gc_keeps_a_due_object_whose_candidate_record_was_dropped_during_its_run():
    """Seed 984 with two collectors and three writers: gc0 marked a chunk live (an open
    session had recorded its upload), stalled, had its lock taken over by gc1, then woke and
    dropped the chunk's candidate record as live; gc1, which had read the record hours
    before, deleted the chunk although no record said it was a candidate any more (the
    grace period counts from the latest record: it now registers it again and waits)."""
    result = run(Config(984, actors=("gc", "gc", "writer", "writer", "writer")))
    assert result.ok, result.failure


def test_a_commit_including_a_dead_writer_checks_the_chunk_objects_it_never_settled():
    """Seed 1689 with two collectors and three writers: a writer reused an existing chunk
    object while a sweep ran (the sweep had read the session's records before the writer
    recorded it), was killed before its settle step, and its fragment's registration landed
    late; the sweep deleted the chunk, and the restarted job's commit (unflushed="discard",
    so the dead writer included) landed naming it. The commit now checks, after its wait
    for sweeps, the objects of the unfinished writers it includes, and refuses."""
    result = run(Config(1689, actors=("gc", "gc", "writer", "writer", "writer")))
    assert result.ok, result.failure


def test_a_write_that_raised_before_buffering_is_not_protected_by_a_later_flush():
    """Seed 302 with two cooperative sessions, a writer and gc (a false alarm of the model):
    a write raised TransientError (its purge-record read failed) before anything was
    buffered; a later flush that registered nothing made the model count that write's
    possible value as staged, and it objected to gc deleting the chunk. The model now
    protects only the values a flush certainly registered."""
    result = run(Config(302, actors=("coop", "coop", "writer", "gc")))
    assert result.ok, result.failure


def test_a_commit_that_landed_returns_its_id_when_its_record_cannot_be_finished(
    tmp_path, monkeypatch
):
    """Seed 930 (under an earlier draw of --stuck-reads): recording the session as
    committed failed after the branch moved, and commit() raised although it had landed."""
    import zarrlake as zl
    from zarrlake.errors import TransientError
    from zarrlake.txn import commit

    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session("main")
    s.write("a/c/0", b"x")
    original = commit.Hold.finish

    def finish(self, commit_id):
        if commit_id is not None:
            raise TransientError("the metastore is unreachable")
        original(self, commit_id)

    monkeypatch.setattr(commit.Hold, "finish", finish)
    cid = s.commit("lands, then its record cannot be finished")
    assert repo.list_branches()["main"] == cid
