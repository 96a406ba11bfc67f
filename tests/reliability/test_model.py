"""Suite 1: model-based testing. A hypothesis state machine drives sessions (create, join,
write chunks and metadata, resize, delete arrays, commit with and without concurrent commits,
abandon, expire), branches, tags and checkouts of old commits, and checks the repository
after every step against a pure-Python model: a key -> bytes dict per commit, a head per
branch, and per session its base and every worker's staged writes. The model predicts
each commit's outcome from DESIGN.md's conflict rules, independently of conflicts.py.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import zarrlake as zl
from tests.helpers.reliability import FIGURES, size

ARRAYS = ("a", "b")
CHUNKS = 3
SIZES = (8, 100, 9000)  # inline in manifests, packed, chunk objects
NAMES = ("x", "y", "rel/1")
State = dict[str, bytes]


def doc(shape: int, version: int) -> bytes:
    return json.dumps(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [shape],
            "data_type": "int64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {"v": version},
        }
    ).encode()


def node_change(old: bytes | None, new: bytes | None) -> str | None:
    """How a metadata write changes its node: created/deleted/resized/attributes."""
    if old == new:
        return None
    if old is None or new is None:
        return "created" if old is None else "deleted"
    a, b = json.loads(old), json.loads(new)
    return "attributes" if a["shape"] == b["shape"] else "resized"


@dataclass
class MCommit:
    state: State
    parent: str | None
    data_keys: set[str] = field(default_factory=set)
    nodes: dict[str, str] = field(default_factory=dict)  # node -> change kind
    second: str | None = None  # a merge commit's second parent


@dataclass
class Txn:
    id: str
    branch: str
    base: str
    staged: dict[str, dict[bytes, bytes | None]] = field(default_factory=dict)  # key->writer->
    latest: dict[str, bytes] = field(default_factory=dict)  # key -> writer that wrote last
    status: str = "open"

    def view(self, base: State) -> State:
        out = dict(base)
        for key, writer in self.latest.items():
            value = self.staged[key][writer]
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out


def changes_of(parent: State, ours: dict[str, bytes | None]) -> tuple[set[str], dict[str, str]]:
    data = {k for k in ours if not k.endswith("zarr.json")}
    nodes = {}
    for k, v in ours.items():
        if k.endswith("zarr.json"):
            kind = node_change(parent.get(k), v)
            if kind:
                nodes[k[: -len("/zarr.json")]] = kind
    return data, nodes


def predict_conflict(
    ours_data: set[str], ours_nodes: dict[str, str], between: list[MCommit]
) -> bool:
    their_data = set().union(*(c.data_keys for c in between))
    their_nodes: dict[str, set[str]] = {}
    for c in between:
        for path, kind in c.nodes.items():
            their_nodes.setdefault(path, set()).add(kind)
    if ours_data & their_data or set(ours_nodes) & set(their_nodes):
        return True
    for path, kinds in their_nodes.items():
        if kinds - {"attributes"} and any(k.startswith(path + "/") for k in ours_data):
            return True
    for path, kind in ours_nodes.items():
        if kind != "attributes" and any(k.startswith(path + "/") for k in their_data):
            return True
    return False


def predict_merge(base: State, ours: State, theirs: State) -> State | None:
    """The three-way merge of `theirs` into `ours` by the rules of DESIGN.md (None: it
    conflicts): keys changed on one side are taken, on both sides to the same value taken
    once, to different values conflict; a structural change of a node conflicts with data
    changes under it on the other side."""
    keys = base.keys() | ours.keys() | theirs.keys()
    oc = {k for k in keys if ours.get(k) != base.get(k)}
    tc = {k for k in keys if theirs.get(k) != base.get(k)}
    same = {k for k in oc & tc if ours.get(k) == theirs.get(k)}
    oc, tc = oc - same, tc - same
    if oc & tc:
        return None
    o_data, o_nodes = changes_of(base, {k: ours.get(k) for k in oc})
    t_data, t_nodes = changes_of(base, {k: theirs.get(k) for k in tc})
    for nodes, data in ((t_nodes, o_data), (o_nodes, t_data)):
        for path, kind in nodes.items():
            if kind != "attributes" and any(k.startswith(path + "/") for k in data):
                return None
    out = dict(ours)
    for k in tc:
        if k in theirs:
            out[k] = theirs[k]
        else:
            out.pop(k, None)
    return out


class RepoMachine(RuleBasedStateMachine):
    backend = "local"

    def __init__(self) -> None:
        super().__init__()
        # The model stores opaque bytes of three sizes (SIZES) under its arrays' chunk
        # keys, which zarr could not decode: the write check would refuse them.
        opaque = {"check_chunks": False}
        if self.backend == "local":
            self.tmp = tempfile.mkdtemp(prefix="zl-model-")
            self.repo = zl.Repo.create(f"{self.tmp}/repo", settings=opaque)
        else:
            self.tmp = None
            self.repo = zl.Repo.create(f"memory://model-{secrets.token_hex(6)}", settings=opaque)
        root = self.repo.resolve("main")
        self.commits: dict[str, MCommit] = {root: MCommit({}, None)}
        self.branches = {"main": root}
        self.tags: dict[str, str] = {}
        self.txns: list[Txn] = []
        self.handles: list[tuple[zl.Session, Txn]] = []
        self.version = 0
        FIGURES["model: state machine runs"] += 1

    def teardown(self) -> None:
        self.repo.close()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # helpers ----------------------------------------------------------------------------

    def step(self) -> None:
        FIGURES["model: steps checked"] += 1

    def open_handles(self) -> list[tuple[zl.Session, Txn]]:
        return [(s, t) for s, t in self.handles if t.status == "open"]

    def pick(self, items: list, i: int):
        return items[i % len(items)]

    def view(self, txn: Txn) -> State:
        return txn.view(self.commits[txn.base].state)

    def read_state(self, session: zl.Session) -> State:
        return {k: session.read(k) for k in session.list_prefix("")}

    def stage(self, session: zl.Session, txn: Txn, key: str, value: bytes | None) -> None:
        """Model a write as staged once the handle flushed it (the durability boundary)."""
        session.flush()
        txn.staged.setdefault(key, {})[session._engine.writer] = value
        txn.latest[key] = session._engine.writer

    # rules ------------------------------------------------------------------------------

    @rule(i=st.integers(0, 99))
    def create_session(self, i):
        branch = self.pick(sorted(self.branches), i)
        s = self.repo.create_session(branch)
        txn = Txn(s.id, branch, self.branches[branch])
        assert s.base_commit == txn.base
        self.txns.append(txn)
        self.handles.append((s, txn))
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99))
    def join(self, i):
        _, txn = self.pick(self.open_handles(), i)
        self.handles.append((self.repo.join_session(txn.id), txn))
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99), chunk=st.integers(0, CHUNKS - 1), size=st.sampled_from(SIZES))
    def write_chunk(self, i, chunk, size):
        s, txn = self.pick(self.open_handles(), i)
        arrays = [a for a in ARRAYS if f"{a}/zarr.json" in self.view(txn)]
        if not arrays:
            return
        key = f"{self.pick(arrays, i)}/c/{chunk}"
        data = random.Random(self.version).randbytes(size)
        self.version += 1
        s.write(key, data)
        self.stage(s, txn, key, data)
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99), array=st.sampled_from(ARRAYS), shape=st.integers(1, 5))
    def write_metadata(self, i, array, shape):
        """Create the array, or change its attributes only (same shape)."""
        s, txn = self.pick(self.open_handles(), i)
        old = self.view(txn).get(f"{array}/zarr.json")
        if old is not None:
            shape = json.loads(old)["shape"][0]
        self.version += 1
        data = doc(shape, self.version)
        s.write(f"{array}/zarr.json", data)
        self.stage(s, txn, f"{array}/zarr.json", data)
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99), array=st.sampled_from(ARRAYS), shape=st.integers(1, 5))
    def resize(self, i, array, shape):
        s, txn = self.pick(self.open_handles(), i)
        old = self.view(txn).get(f"{array}/zarr.json")
        if old is None or json.loads(old)["shape"][0] == shape:
            return
        self.version += 1
        data = doc(shape, self.version)
        s.write(f"{array}/zarr.json", data)
        self.stage(s, txn, f"{array}/zarr.json", data)
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99), array=st.sampled_from(ARRAYS))
    def delete_array(self, i, array):
        s, txn = self.pick(self.open_handles(), i)
        keys = sorted(k for k in self.view(txn) if k.startswith(f"{array}/"))
        assert s.list_prefix(f"{array}/") == keys
        s.delete_many(keys)
        for k in keys:
            self.stage(s, txn, k, None)
        self.step()

    def _commit(self, s: zl.Session, txn: Txn) -> None:
        head = self.branches[txn.branch]
        contents: dict[str, bytes | None] = {}
        clash = False
        for key, by_writer in txn.staged.items():
            values = set(by_writer.values())
            clash |= len(values) > 1
            contents[key] = by_writer[txn.latest[key]]
        base = self.commits[txn.base].state
        # what the base already holds is no change (written back unchanged, or written and
        # deleted again where the base has nothing)
        contents = {k: v for k, v in contents.items() if base.get(k) != v}
        ours_data, ours_nodes = changes_of(base, contents)
        between = []
        cid = head
        while cid != txn.base and cid is not None:  # None: the branch was reset away
            between.append(self.commits[cid])
            cid = self.commits[cid].parent
        conflict = clash or cid is None or predict_conflict(ours_data, ours_nodes, between)
        FIGURES["model: transactions run"] += 1
        if not contents and not clash:  # refused before any conflict check
            try:
                s.commit("model")
            except zl.NoChangesError:
                FIGURES["model: commits changing nothing refused"] += 1
                assert s.state == "open"
                return
            raise AssertionError("a commit that changes nothing should be refused")
        if conflict:
            try:
                s.commit("model")
            except zl.ConflictError:
                FIGURES["model: conflicts predicted and raised"] += 1
                assert s.state == "open"
                return
            raise AssertionError(f"commit should conflict: ours {contents}, between {between}")
        new_id = s.commit("model")
        if between:
            FIGURES["model: commits rebased over concurrent ones"] += 1
        parent = self.commits[head].state
        state = dict(parent)
        for k, v in contents.items():
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
        data, nodes = changes_of(parent, contents)
        self.commits[new_id] = MCommit(state, head, data, nodes)
        self.branches[txn.branch] = new_id
        txn.status = "committed"
        assert self.read_state(self.repo.readonly_session(new_id)) == state
        assert self.repo.log(txn.branch, limit=2)[1].id == head

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99))
    def commit(self, i):
        self._commit(*self.pick(self.open_handles(), i))
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99), chunk=st.integers(0, CHUNKS - 1), meta=st.booleans())
    def commit_after_concurrent_commit(self, i, chunk, meta):
        """Another session commits to the same branch first, then ours commits (rebase or
        conflict)."""
        s, txn = self.pick(self.open_handles(), i)
        head = self.branches[txn.branch]
        arrays = [a for a in ARRAYS if f"{a}/zarr.json" in self.commits[head].state]
        if arrays:
            other = self.repo.create_session(txn.branch)
            otxn = Txn(other.id, txn.branch, head)
            array = self.pick(arrays, i + chunk)
            self.version += 1
            if meta:
                shape = json.loads(self.commits[head].state[f"{array}/zarr.json"])["shape"][0]
                key, data = f"{array}/zarr.json", doc(shape, self.version)
            else:
                key, data = f"{array}/c/{chunk}", random.Random(self.version).randbytes(100)
            other.write(key, data)
            self.stage(other, otxn, key, data)
            self.txns.append(otxn)
            self._commit(other, otxn)
            assert otxn.status == "committed"
        self._commit(s, txn)
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99))
    def abandon(self, i):
        s, txn = self.pick(self.open_handles(), i)
        s.abandon()
        txn.status = "abandoned"
        assert s.state == "abandoned"
        with_error = zl.SessionClosedError
        try:
            s.write("a/zarr.json", doc(1, 0))
        except with_error:
            pass
        else:
            raise AssertionError("wrote into an abandoned session")
        self.step()

    @precondition(lambda self: self.open_handles())
    @rule(i=st.integers(0, 99))
    def expire(self, i):
        """Rewrite the session record's expiry into the past instead of waiting."""
        s, txn = self.pick(self.open_handles(), i)
        self.repo._context.records.update(txn.id, lambda r: replace(r, expires_at=time.time() - 1))
        txn.status = "expired"
        for fn in (lambda: s.commit("late"), lambda: s.write("a/zarr.json", doc(1, 0))):
            try:
                fn()
            except zl.SessionExpiredError:
                continue
            raise AssertionError("an expired session accepted a write or commit")
        assert s.state == "expired"
        assert txn.id not in {r.id for r in self.repo.list_sessions()}
        self.step()

    @rule(name=st.sampled_from(NAMES), i=st.integers(0, 999))
    def create_branch(self, name, i):
        at = self.pick(list(self.commits), i)  # creation order: ids vary
        if name in self.branches or name in self.tags:  # names are a branch's or a tag's
            try:
                self.repo.create_branch(name, at)
            except zl.AlreadyExistsError:
                return
            raise AssertionError(f"branch {name} created twice")
        self.repo.create_branch(name, at)
        self.branches[name] = at
        self.step()

    @rule(name=st.sampled_from(NAMES), i=st.integers(0, 999))
    def tag(self, name, i):
        at = self.pick(list(self.commits), i)  # creation order: ids vary
        if name in self.tags or name in self.branches:
            try:
                self.repo.create_tag(name, at)
            except zl.AlreadyExistsError:
                return
            raise AssertionError(f"tag {name} created twice")
        self.repo.create_tag(name, at)
        self.tags[name] = at
        self.step()

    @rule(i=st.integers(0, 999), by_tag=st.booleans())
    def checkout_old_commit(self, i, by_tag):
        tags = sorted(set(self.tags) - set(self.branches))  # a branch's name wins over a tag's
        if by_tag and tags:
            name = self.pick(tags, i)
            s, cid = self.repo.checkout(name), self.tags[name]
            assert s.read_only
        else:
            cid = self.pick(list(self.commits), i)  # creation order: ids vary
            s = self.repo.readonly_session(cid)
        assert s.base_commit == cid
        assert self.read_state(s) == self.commits[cid].state
        self.step()

    # merge and reset ----------------------------------------------------------------------

    def model_ancestors(self, cid: str) -> set[str]:
        seen, todo = {cid}, [cid]
        while todo:
            c = self.commits[todo.pop()]
            for p in (c.parent, c.second):
                if p is not None and p not in seen:
                    seen.add(p)
                    todo.append(p)
        return seen

    def model_merge_bases(self, a: str, b: str) -> set[str]:
        """Common ancestors of a and b that are no ancestor of another common ancestor."""
        common = self.model_ancestors(a) & self.model_ancestors(b)
        below = set()
        for c in common:
            below |= self.model_ancestors(c) - {c}
        return common - below

    @rule(a=st.integers(0, 99), b=st.integers(0, 99), never=st.booleans())
    def merge(self, a, b, never):
        """Merge one branch into another (or itself): fast-forward, nothing, a merge commit
        or a conflict, as the model predicts."""
        into = self.pick(sorted(self.branches), a)
        source = self.pick(sorted(set(self.branches) - {into}) or [into], b)
        head, src = self.branches[into], self.branches[source]
        base = self.repo.merge_base(into, source)
        assert base in self.model_merge_bases(head, src)
        ff = "never" if never else "allow"
        FIGURES["model: merges run"] += 1
        if base == src:
            assert self.repo.merge(source, into, fast_forward=ff) == head
            return
        if base == head and not never:
            assert self.repo.merge(source, into) == src
            self.branches[into] = src
            return
        result = predict_merge(
            self.commits[base].state, self.commits[head].state, self.commits[src].state
        )
        if result is None:
            try:
                self.repo.merge(source, into, fast_forward=ff)
            except zl.ConflictError:
                FIGURES["model: merge conflicts predicted and raised"] += 1
                assert self.repo.resolve(into) == head
                return
            raise AssertionError(f"merge of {source} into {into} should conflict")
        cid = self.repo.merge(source, into, fast_forward=ff)
        parent = self.commits[head].state
        changed = {k: result.get(k) for k in parent.keys() | result.keys()}
        changed = {k: v for k, v in changed.items() if v != parent.get(k)}
        data, nodes = changes_of(parent, changed)
        self.commits[cid] = MCommit(result, head, data, nodes, second=src)
        self.branches[into] = cid
        assert self.repo.log(into, limit=1)[0].parent_ids == (head, src)
        assert self.read_state(self.repo.readonly_session(cid)) == result
        self.step()

    @rule(b=st.integers(0, 99), i=st.integers(0, 999), stale=st.booleans())
    def reset(self, b, i, stale):
        """Move a branch to any commit, compare-and-swap against its head (or a stale one,
        which must fail and move nothing)."""
        branch = self.pick(sorted(self.branches), b)
        target = self.pick(list(self.commits), i)  # creation order: ids vary between runs
        head = self.branches[branch]
        others = [c for c in self.commits if c != head]
        if stale and others:
            try:
                self.repo.reset_branch(branch, target, expected=self.pick(others, i))
            except zl.ConflictError:
                assert self.repo.resolve(branch) == head
                return
            raise AssertionError("reset_branch with a stale expected head moved the branch")
        assert self.repo.reset_branch(branch, target, expected=head) == target
        self.branches[branch] = target
        FIGURES["model: resets"] += 1
        self.step()

    # invariants -------------------------------------------------------------------------

    @invariant()
    def refs_match(self):
        assert self.repo.list_branches() == self.branches
        assert self.repo.list_tags() == self.tags

    @invariant()
    def open_sessions_see_base_plus_staged(self):
        seen = set()
        for s, txn in self.open_handles():
            if txn.id in seen:
                continue
            seen.add(txn.id)
            assert self.read_state(s) == self.view(txn)
        assert {r.id for r in self.repo.list_sessions()} == {
            t.id for t in self.txns if t.status == "open"
        }


SETTINGS = settings(
    max_examples=size(25, 300),
    stateful_step_count=size(40, 80),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class LocalMachine(RepoMachine):
    backend = "local"


class MemoryMachine(RepoMachine):
    backend = "memory"


TestModelLocalSqlite = LocalMachine.TestCase
TestModelLocalSqlite.settings = SETTINGS
TestModelMemory = MemoryMachine.TestCase
TestModelMemory.settings = SETTINGS


def test_resize_then_attributes_still_conflicts_with_chunk_writes():
    """Found by the model: two concurrent commits, a resize and then an attributes change,
    must still make a chunk write into that array conflict."""
    repo = zl.Repo.create(f"memory://model-{secrets.token_hex(6)}")
    s = repo.create_session()
    s.write("a/zarr.json", doc(4, 1))
    s.commit("base")
    ours = repo.create_session()
    ours.write("a/c/3", b"x" * 8)
    for shape, version in ((2, 2), (2, 3)):
        other = repo.create_session()
        other.write("a/zarr.json", doc(shape, version))
        other.commit(f"v{version}")
    assert predict_conflict(
        {"a/c/3"}, {}, [MCommit({}, None, set(), {"a": k}) for k in ("resized", "attributes")]
    )
    try:
        ours.commit("ours")
    except zl.ConflictError as e:
        assert [c.kind for c in e.conflicts] == ["resized"]
    else:
        raise AssertionError("chunk written into a concurrently resized array was committed")


def test_listing_agrees_with_reads_when_workers_disagree():
    """Found by the model: one worker writes a key, another then deletes it; listing and
    reading must both show the latest record (the commit then refuses the clash)."""
    repo = zl.Repo.create(f"memory://model-{secrets.token_hex(6)}")
    x = repo.create_session()
    y = repo.join_session(x.id)
    x.write("a/zarr.json", doc(2, 1))
    y.delete("a/zarr.json")
    assert x.read("a/zarr.json") is None
    assert x.list_prefix("") == y.list_prefix("") == []
    y.write("a/zarr.json", doc(2, 2))
    assert x.list_prefix("") == ["a/zarr.json"] and x.read("a/zarr.json") == doc(2, 2)
    try:
        x.commit("clash")
    except zl.ConflictError as e:
        assert [c.kind for c in e.conflicts] == ["writers"]
    else:
        raise AssertionError("two workers staged different bytes and the commit went through")


def test_an_array_written_and_deleted_again_in_a_first_commit_changes_nothing():
    """Found by the model: on a repository with no chunk yet, a session that wrote an array
    and deleted it again committed the deletes of keys that never existed, instead of being
    refused as changing nothing (and conflicted with a concurrent commit creating them)."""
    repo = zl.Repo.create(f"memory://model-{secrets.token_hex(6)}")
    s = repo.create_session()
    s.write("b/zarr.json", doc(1, 1))
    s.write("b/c/0", b"12345678")
    s.delete_many(sorted(s.list_prefix("b/")))
    other = repo.create_session()
    other.write("b/zarr.json", doc(1, 2))
    other.write("b/c/0", b"abcdefgh")
    landed = other.commit("creates b")
    with pytest.raises(zl.NoChangesError):
        s.commit("wrote b and deleted it again")
    assert s.state == "open"
    assert repo.list_branches()["main"] == landed
    assert repo.readonly_session("main").read("b/c/0") == b"abcdefgh"
