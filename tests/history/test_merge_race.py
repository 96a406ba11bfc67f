"""A merge racing commits from other processes lands once, with both histories intact."""

from __future__ import annotations

import zarrlake as zl
from tests.history import workers


def test_merge_racing_commits_from_other_processes(tmp_path):
    location = str(tmp_path / "repo")
    repo = zl.Repo.create(location)
    repo.create_branch("dev")
    dev_keys = {}
    for t in range(3):
        s = repo.create_session("dev")
        items = [(f"dev/{t}/{i}", f"d{t}.{i}".encode()) for i in range(400)]
        s.write_many(items)
        dev_keys.update(items)
        s.commit(f"dev {t}")
    dev_head = repo.resolve("dev")
    start = repo.resolve("main")

    *committed, merged = workers.run(location, 2, 12, "dev", tmp_path)
    mid = merged["merge"]

    history = [c for c in repo.log("main")]
    ids = [c.id for c in history]
    assert ids.count(mid) == 1
    assert [c.id for c in history if len(c.parent_ids) == 2] == [mid]
    merge_commit = history[ids.index(mid)]
    assert merge_commit.parent_ids[1] == dev_head
    assert ids[-2] == start or start in ids
    acks = [cid for w in committed for cid in w["acks"]]
    assert len(acks) == 24 and set(acks) <= set(ids)  # every commit on the first-parent line
    assert len(ids) == 1 + 24 + 1  # the initial commit, the commits, one merge
    s = repo.readonly_session("main")
    for i, w in enumerate(committed):
        for t in range(len(w["acks"])):
            assert s.read(f"w{i}/{t}") == f"{i}:{t}".encode()
    assert {k: s.read(k) for k in dev_keys} == dev_keys
    # dev's own history stays reachable through the merge's second parent
    assert [c.message for c in repo.log(f"{mid}^2")][:3] == ["dev 2", "dev 1", "dev 0"]
    repo.close()


def test_merge_whose_branch_moved_before_its_swap_rebuilds_on_the_new_head(tmp_path, monkeypatch):
    """Deterministic version: right before the merge's first compare-and-swap, another
    process commits to main; the swap fails, the merge is rebuilt on the new head and lands
    once, on top of that commit."""
    import subprocess
    import sys

    from zarrlake.vc.refs import Refs

    location = str(tmp_path / "repo")
    repo = zl.Repo.create(location)
    repo.create_branch("dev")
    s = repo.create_session("dev")
    s.write("dev/x", b"from dev")
    dev = s.commit("dev work")
    s = repo.create_session()
    s.write("main/y", b"from main")
    s.commit("main work")

    real_move = Refs.move
    calls = []

    def move(self, name, commit_id, expected_version, landing=None):
        calls.append(commit_id)
        if len(calls) == 1:
            code = (
                "import zarrlake as zl, sys; r = zl.Repo.open(sys.argv[1]); "
                "s = r.create_session(); s.write('other/z', b'from another process'); "
                "print(s.commit('concurrent'))"
            )
            out = subprocess.run(
                [sys.executable, "-c", code, location], capture_output=True, text=True, check=True
            )
            calls.append(("other", out.stdout.strip()))
        return real_move(self, name, commit_id, expected_version, landing)

    monkeypatch.setattr(Refs, "move", move)
    mid = repo.merge("dev")
    monkeypatch.undo()
    other = calls[1][1]
    assert len(calls) == 3 and calls[2] == mid != calls[0]
    merged = repo.log("main", limit=1)[0]
    assert merged.id == mid and merged.parent_ids == (other, dev)
    snap = repo.readonly_session("main")
    assert snap.read("dev/x") == b"from dev"
    assert snap.read("main/y") == b"from main"
    assert snap.read("other/z") == b"from another process"
    assert [c.message for c in repo.log("main")][1:3] == ["concurrent", "main work"]
    repo.close()
