"""The requests of a one-chunk commit on the bucket-only metastore, counted by the
benchmarks' relay in front of moto's S3 server (every request on the wire, with its reply;
the uncontended commit's are counted in test_bucket_rounds.py):
the `refs` head is read once at begin (the branch head with the repository's moved marker)
and once in the commit (the branch head, the protection and check rules and the session's
landing fence); a branch swap that another commit beat is answered from the head the
refusal read, so losing it costs one read of `refs`, not three, and the rebuild reads what
it needs of the other commit in two round trips."""

from __future__ import annotations

import re
import threading
from collections import Counter

import numpy as np
import pytest
import zarr

import zarrlake as zl
from benchmarks.relay import RelayProcess
from benchmarks.wire import format_log
from tests.fixtures.s3 import s3_options
from tests.perf.test_commit_calls import held_cleanup  # noqa: F401 - a fixture
from zarrlake.vc import commit_protocol
from zarrlake.vc.gc_protocol import uploads_partition

CHUNK = (64, 64)  # 16 KiB of float32: uploaded, not staged inline

REQUESTS = 18  # (counted in test_bucket_rounds.py, with its round trips)
"""Begin + write one chunk + commit, till the commit returns, in a process that committed
before: the branch head (`refs`); the record carrying the chunk's upload record (its
shard's head held from the last session of this thread, whose ids keep to one shard); the
chunk with the marker, the upload record's copy, the base's commit record and expiry
marker (one round trip since the record carries the upload record; the chunk came a round
after them before); the seal with the final flush; the gather, the
gc phase and `refs` (head, rules, landing fence); four objects and the fence; the branch
swap. (19 when the record's shard was read at begin beside `refs`, a random one each
session; 22 when `refs` was read at begin for the branch and the moved marker apart, and
in the commit for the head and the rules with the seal, and for the fence after it.)"""


def _value(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(CHUNK, dtype=np.float32)


def requests_of(window: dict) -> Counter[tuple[str, str, str]]:
    """(method, what, status) of each request logged: `what` is `refs`, `sessions`,
    `stage`, ... for a metastore head, else the object's kind (`chunks`, `commits`)."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for e in window["log"]:
        if "round" not in e:
            continue  # a new connection
        method, _, target = e["what"].partition(" ")
        path = target.split(" ")[0].split("?")[0]
        head = re.search(r"/meta/[0-9a-f]+~2f([a-z]+)", path)
        what = head.group(1) if head else path.split("/repo/", 1)[-1].split("/")[0]
        seen[method, what, e.get("reply", "")] += 1
    return seen


def _with_array(location: str, options: dict) -> None:
    base = zl.Repo.create(location, storage_options=options)
    s = base.create_session("main")
    zarr.create_array(s.store, name="a", shape=(8, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    s.commit("array a")
    base.close()


def test_a_lost_branch_swap_reads_refs_once_before_the_rebuild(
    s3_location,
    s3_server,
    held_cleanup: threading.Event,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held_cleanup.set()
    location, options = s3_location
    _with_array(location, options)
    other = zl.Repo.open(location, storage_options=options)  # another process, not relayed
    host, port = s3_server.removeprefix("http://").split(":")
    swap = commit_protocol.update_branch
    beaten: list[str] = []
    armed = [True]

    def beaten_once(*args, **kwargs):
        if armed.pop() if armed else False:  # another commit lands first: this one's
            t = other.create_session("main")  # swap is refused
            zarr.open_array(t.store, path="a")[7] = _value(7)
            beaten.append(t.commit("the other's chunk"))
        return swap(*args, **kwargs)

    with RelayProcess() as relays:
        # delayed, so requests sent together are seen to overlap however late a loaded
        # machine schedules the thread sending the second (the rounds are counted below)
        local = relays.add("S3", host, int(port), delay_ms=60)
        repo = zl.Repo.open(location, storage_options=s3_options(f"http://127.0.0.1:{local}"))
        s = repo.create_session("main")
        zarr.open_array(s.store, path="a")[1] = _value(1)
        s._txn.flush()
        monkeypatch.setattr(commit_protocol, "update_branch", beaten_once)
        held_cleanup.clear()
        relays.start(log=True)
        ours = s.commit("chunk 1")
        window = relays.window()
        held_cleanup.set()
        s._txn.wait()
        repo.close()
    requests = requests_of(window)
    print("\n".join(format_log(window["log"])))
    assert requests["PUT", "refs", "412"] == 1, requests  # the swap the other commit beat
    assert requests["PUT", "refs", "200"] == 1, requests
    # the commit's one read, and the head the refusal read (what it was refused on)
    assert requests["GET", "refs", "200"] == 2, requests
    # From the refusal to the swap again: the head; the other commit's record with its
    # snapshot (named by the branch's value); its change set with the manifest range the
    # chunk falls in; the four objects with the fence; the swap. (8 when the walk down
    # read the base's record too, and the snapshot, change set and range came one by one.)
    swaps = [e["round"] for e in window["log"] if e.get("what", "").startswith("PUT ")
             and "~2frefs/" in e["what"]]  # fmt: skip
    assert swaps[1] - swaps[0] == 5, swaps
    assert requests["GET", "commits", "200"] == 1, requests  # the other's record alone
    # the rebuild sends only its new objects: the change set the first attempt stored
    # (the same bytes, so the same key) is not sent again to be refused
    assert requests["PUT", "changes", "200"] == 1, requests
    assert not requests["PUT", "changes", "412"], requests
    log = other.log("main")
    assert [c.id for c in log[:2]] == [ours, beaten[0]]
    got = zarr.open_array(other.readonly_session("main").store, path="a", mode="r")
    assert np.array_equal(got[1], _value(1)) and np.array_equal(got[7], _value(7))
    other.close()


AFTER = 5
"""What a one-chunk commit leaves to the background on the bucket metastore: the record
marked committed beside the read of the staged records; the upload records read; their
partition dropped (its head deleted on condition it is the one read, which had no page
written: nothing listed); the staged records' partition the same. (7 when each drop also
listed the partition's pages; 9 when the upload records were deleted first, and their
partition read again to see it empty, before it was dropped.)"""


def test_the_clean_up_drops_the_upload_records_with_their_partition(
    s3_location,
    s3_server,
    held_cleanup: threading.Event,  # noqa: F811 - the fixture
) -> None:
    held_cleanup.set()
    location, options = s3_location
    _with_array(location, options)
    host, port = s3_server.removeprefix("http://").split(":")
    with RelayProcess() as relays:
        local = relays.add("S3", host, int(port))
        repo = zl.Repo.open(location, storage_options=s3_options(f"http://127.0.0.1:{local}"))
        for i in range(2):  # the first warms the process's caches
            s = repo.create_session("main")
            zarr.open_array(s.store, path="a")[i] = _value(i)
            held_cleanup.clear()
            s.commit(f"chunk {i}")
            relays.start(log=True)
            held_cleanup.set()  # the background work, alone in the window
            s._txn.wait()
            window = relays.window()
        ctx, sid = repo._context, s._txn.id
        assert sid is not None
        for partition in (ctx.stage_partition(sid), uploads_partition(ctx, sid)):
            assert list(ctx.meta.scan(partition)) == [], partition  # both dropped
        repo.close()
    requests = requests_of(window)
    print("\n".join(format_log(window["log"])))
    assert sum(requests.values()) == AFTER, requests
    assert requests["GET", "uploads", "200"] == 1, requests  # read once, not again
    assert not requests["PUT", "uploads", "200"], requests  # no records deleted one by one
    assert requests["DELETE", "stage", "204"] == requests["DELETE", "uploads", "204"] == 1
    check = zl.Repo.open(location, storage_options=options)
    got = zarr.open_array(check.readonly_session("main").store, path="a", mode="r")[:2]
    assert np.array_equal(got, np.stack([_value(0), _value(1)]))
    assert check.fsck() == []
    check.close()
