"""zarr's own store conformance suite (zarr.testing.store.StoreTests) run against the
session store, writable and read-only, on every backend combination.

The suite's `set`/`get` helpers bypass the store: they go through the session's sync
write/read (writable) or commit through a separate session and re-pin the read-only
session to the new head (read-only). Tests that cannot apply to a read-only, versioned
store are overridden with tests of zarrlake's documented behaviour.

A `zarr.json` must be a zarr v3 metadata document zarr can open: the suite's helpers write
one (carrying the suite's bytes as an attribute) where the suite asks for other bytes under
such a key, and the tests that write other bytes there through the store itself are
overridden to write documents, and to check that the suite's bytes are refused.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync
from zarr.testing.store import StoreTests

import zarrlake as zl
from zarrlake.errors import InvalidInputError
from zarrlake.zarr_store import SessionStore


def repo_of(store: SessionStore) -> zl.Repo:
    """The repository of the store's session, through the per-process connection."""
    return zl.Repo.of(store.session)


READ_ONLY_MESSAGE = "store was opened in read-only mode and does not support writing"


def is_meta(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


def doc(data: bytes = b"") -> bytes:
    """A zarr v3 group document carrying `data` (hex) as an attribute."""
    attributes = {"suite_bytes": data.hex()}
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()


def fit(key: str, data: bytes) -> bytes:
    """What the suite's helpers write: `data`, or a document carrying it under `zarr.json`."""
    return doc(data) if is_meta(key) else data


class TestWritableSessionStore(StoreTests[SessionStore, cpu.Buffer]):
    """A writable session on a branch; nothing is committed, the store is the session."""

    store_cls = SessionStore
    buffer_cls = cpu.Buffer

    async def set(self, store: SessionStore, key: str, value: Buffer) -> None:
        store.session.write(key, fit(key, value.to_bytes()))

    async def get(self, store: SessionStore, key: str) -> Buffer:
        data = store.session.read(key)
        assert data is not None, f"{key} is not in the session"
        return self.buffer_cls.from_bytes(data)

    @pytest.fixture
    def store_kwargs(self, shared_repo: zl.Repo, fresh_branch: str) -> dict[str, Any]:
        return {"session": shared_repo.create_session(fresh_branch), "read_only": False}

    def test_store_repr(self, store: SessionStore) -> None:
        assert repr(store).startswith("SessionStore(<Session ")
        assert store.session.id in repr(store)

    def test_store_supports_writes(self, store: SessionStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: SessionStore) -> None:
        assert store.supports_listing

    async def test_serializable_store(self, store: SessionStore) -> None:
        """Besides the suite's check: the unpickled store re-joins the same session, so its
        writes are the session's writes, once flushed."""
        await super().test_serializable_store(store)
        clone = pickle.loads(pickle.dumps(store))
        await clone.set("joined", self.buffer_cls.from_bytes(b"via pickle"))
        assert clone.session.read("joined") == b"via pickle"
        clone.session.flush()
        assert store.session.read("joined") == b"via pickle"

    async def test_writes_are_invisible_until_commit(self, store: SessionStore) -> None:
        """Not in the suite: the store writes into a transaction, seen by others only once
        committed."""
        repo, branch = repo_of(store), store.session.branch
        assert branch is not None
        await store.set("a/zarr.json", self.buffer_cls.from_bytes(doc()))
        assert repo.readonly_session(branch).read("a/zarr.json") is None
        store.session.commit("publish")
        assert repo.readonly_session(branch).read("a/zarr.json") == doc()

    # overrides: the suite writes bytes that are no zarr v3 document under zarr.json keys -----

    async def assert_not_a_document(self, store: SessionStore, key: str, data: bytes) -> None:
        """Writing `data` under metadata key `key` through the store is refused, naming the
        key; nothing is written."""
        before = await _collect_aiterator(store.list())
        buf = self.buffer_cls.from_bytes(data)
        for call in (store.set(key, buf), store._set_many([("c/9", buf), (key, buf)])):
            with pytest.raises(InvalidInputError, match=f"metadata document '{key}'"):
                await call
        assert await _collect_aiterator(store.list()) == before

    @pytest.mark.parametrize("key", ["zarr.json", "c/0", "foo/c/0.0", "foo/0/0"])
    @pytest.mark.parametrize("data", [b"\x01\x02\x03\x04", b""])
    async def test_set(self, store: SessionStore, key: str, data: bytes) -> None:
        if is_meta(key):
            await self.assert_not_a_document(store, key, data)
        await super().test_set(store, key, fit(key, data))

    async def test_set_many(self, store: SessionStore) -> None:
        await self.assert_not_a_document(store, "zarr.json", b"zarr.json")
        keys = ["zarr.json", "c/0", "foo/c/0.0", "foo/0/0"]
        items = {k: self.buffer_cls.from_bytes(fit(k, k.encode())) for k in keys}
        await store._set_many(items.items())
        for k, v in items.items():
            assert (await self.get(store, k)).to_bytes() == v.to_bytes()

    async def test_exists(self, store: SessionStore) -> None:
        await self.assert_not_a_document(store, "foo/zarr.json", b"bar")
        assert not await store.exists("foo")
        await store.set("foo/zarr.json", self.buffer_cls.from_bytes(doc(b"bar")))
        assert await store.exists("foo/zarr.json")

    async def test_delete(self, store: SessionStore) -> None:
        await store.set("foo/zarr.json", self.buffer_cls.from_bytes(doc(b"bar")))
        assert await store.exists("foo/zarr.json")
        await store.delete("foo/zarr.json")
        assert not await store.exists("foo/zarr.json")

    async def test_delete_dir(self, store: SessionStore) -> None:
        await self.assert_not_a_document(store, "zarr.json", b"root")
        for key, data in [
            ("zarr.json", doc(b"root")),
            ("foo-bar/zarr.json", doc(b"root")),
            ("foo/zarr.json", doc(b"bar")),
            ("foo/c/0", b"chunk"),
        ]:
            await store.set(key, self.buffer_cls.from_bytes(data))
        await store.delete_dir("foo")
        assert await store.exists("zarr.json")
        assert await store.exists("foo-bar/zarr.json")
        assert not await store.exists("foo/zarr.json")
        assert not await store.exists("foo/c/0")

    async def test_list(self, store: SessionStore) -> None:
        assert await _collect_aiterator(store.list()) == ()
        items = {"foo/zarr.json": doc(), **{f"foo/c/{i}": b"" for i in range(10)}}
        await store._set_many((k, self.buffer_cls.from_bytes(v)) for k, v in items.items())
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)

    async def test_list_prefix(self, store: SessionStore) -> None:
        prefixes = ("", "a/", "a/b/", "a/b/c/")
        keys = [p + "zarr.json" for p in prefixes]
        await store._set_many((k, self.buffer_cls.from_bytes(doc())) for k in keys)
        for prefix in prefixes:
            observed = sorted(await _collect_aiterator(store.list_prefix(prefix)))
            assert observed == sorted(k for k in keys if k.startswith(prefix))

    async def test_list_empty_path(self, store: SessionStore) -> None:
        items = {"foo/bar/zarr.json": doc(), "foo/bar/c/1": b"", "foo/baz/c/0": b""}
        await store._set_many((k, self.buffer_cls.from_bytes(v)) for k, v in items.items())
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == sorted(items)
        observed = sorted(await _collect_aiterator(store.list_prefix("foo/bar/")))
        assert observed == ["foo/bar/c/1", "foo/bar/zarr.json"]

    async def test_list_dir(self, store: SessionStore) -> None:
        assert await _collect_aiterator(store.list_dir("")) == ()
        b = self.buffer_cls.from_bytes
        for root, items in [
            ("foo", {"foo/zarr.json": b(doc(b"bar")), "foo/c/1": b(b"\x01")}),
            (
                "foo/bar",
                {
                    "foo/bar/foobar_first_child": b(b"1"),
                    "foo/bar/foobar_second_child/zarr.json": b(doc(b"2")),
                },
            ),
        ]:
            assert await _collect_aiterator(store.list_dir(root)) == ()
            await store._set_many(items.items())
            expected = sorted({k.removeprefix(f"{root}/").split("/")[0] for k in items})
            assert sorted(await _collect_aiterator(store.list_dir(root))) == expected
            assert sorted(await _collect_aiterator(store.list_dir(f"{root}/"))) == expected


class TestReadOnlySessionStore(StoreTests[SessionStore, cpu.Buffer]):
    """The store of a read-only session pinned to one commit. The `set` helper commits the
    key on the branch and re-pins the store's session to the new head."""

    store_cls = SessionStore
    buffer_cls = cpu.Buffer

    async def set(self, store: SessionStore, key: str, value: Buffer) -> None:
        repo = repo_of(store)
        writer = repo.create_session(self.branch)
        writer.write(key, fit(key, value.to_bytes()))
        commit = writer.commit(f"set {key}")
        store.session = repo.readonly_session(commit)

    async def get(self, store: SessionStore, key: str) -> Buffer:
        data = store.session.read(key)
        assert data is not None, f"{key} is not in the session"
        return self.buffer_cls.from_bytes(data)

    async def set_many(self, store: SessionStore, items: dict[str, Buffer]) -> None:
        repo = repo_of(store)
        writer = repo.create_session(self.branch)
        writer.write_many([(k, fit(k, v.to_bytes())) for k, v in items.items()])
        store.session = repo.readonly_session(writer.commit("set many"))

    @pytest.fixture
    def store_kwargs(self, shared_repo: zl.Repo, fresh_branch: str) -> dict[str, Any]:
        self.branch = fresh_branch
        return {"session": shared_repo.readonly_session(fresh_branch), "read_only": True}

    async def assert_refused(self, store: SessionStore, *keys: str) -> None:
        """Every write and delete through the store raises ReadOnlyError; nothing changes."""
        before = await _collect_aiterator(store.list())
        buf = self.buffer_cls.from_bytes(b"x")
        for key in keys:
            for call in (
                store.set(key, buf),
                store.set_if_not_exists(key, buf),
                store._set_many([(key, buf)]),
                store.delete(key),
                store.delete_dir(key),
            ):
                with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
                    await call
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            await store.clear()
        assert await _collect_aiterator(store.list()) == before

    def test_store_repr(self, store: SessionStore) -> None:
        assert repr(store).startswith("SessionStore(<Session read-only at ")
        assert "read_only=True" in repr(store)

    def test_store_supports_writes(self, store: SessionStore) -> None:
        assert store.supports_writes  # the class can write; this instance refuses to
        assert store.read_only

    def test_store_supports_listing(self, store: SessionStore) -> None:
        assert store.supports_listing

    # overrides: the suite writes through the store, which a pinned session refuses --------

    def test_store_read_only(self, store: SessionStore) -> None:
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False  # type: ignore[misc]

    async def test_store_open_read_only(self, open_kwargs: dict[str, Any]) -> None:
        """A pinned session's store is read-only whatever `read_only` asks for."""
        for read_only in (True, False):
            store = await self.store_cls.open(**{**open_kwargs, "read_only": read_only})
            assert store._is_open
            assert store.read_only

    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None:
        """with_read_only(False) cannot make a pinned commit writable: ReadOnlyError."""
        store = await self.store_cls.open(**open_kwargs)
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.with_read_only(read_only=False)
        reader = store.with_read_only(read_only=True)
        assert reader.read_only and reader == store
        await self.assert_refused(reader, "foo")

    async def test_serializable_store(self, store: SessionStore) -> None:
        await self.set(store, "foo", self.buffer_cls.from_bytes(b"\x01\x02\x03\x04"))
        clone: SessionStore = pickle.loads(pickle.dumps(store))
        assert clone == store and clone.read_only
        assert clone.session.base_commit == store.session.base_commit
        got = await clone.get("foo", prototype=default_buffer_prototype())
        assert got is not None and got.to_bytes() == b"\x01\x02\x03\x04"
        await self.assert_refused(clone, "foo")

    async def test_set(self, store: SessionStore) -> None:
        await self.assert_refused(store, "zarr.json", "c/0", "foo/c/0.0", "foo/0/0")

    async def test_set_not_open(self, store_not_open: SessionStore) -> None:
        assert not store_not_open._is_open
        await self.assert_refused(store_not_open, "c/0")

    async def test_set_many(self, store: SessionStore) -> None:
        await self.assert_refused(store, "zarr.json", "c/0")

    async def test_set_if_not_exists(self, store: SessionStore) -> None:
        await self.set(store, "k", self.buffer_cls.from_bytes(b"0000"))
        await self.assert_refused(store, "k", "k2")
        got = await store.get("k", default_buffer_prototype())
        assert got is not None and got.to_bytes() == b"0000"
        assert await store.get("k2", default_buffer_prototype()) is None

    async def test_exists(self, store: SessionStore) -> None:
        assert not await store.exists("foo/zarr.json")
        await self.set(store, "foo/zarr.json", self.buffer_cls.from_bytes(b"bar"))
        assert await store.exists("foo/zarr.json")

    async def test_delete(self, store: SessionStore) -> None:
        await self.set(store, "foo/zarr.json", self.buffer_cls.from_bytes(b"bar"))
        await self.assert_refused(store, "foo/zarr.json")
        assert await store.exists("foo/zarr.json")

    async def test_delete_dir(self, store: SessionStore) -> None:
        await self.set(store, "foo/c/0", self.buffer_cls.from_bytes(b"chunk"))
        await self.assert_refused(store, "foo")
        assert await store.exists("foo/c/0")

    async def test_delete_nonexistent_key_does_not_raise(self, store: SessionStore) -> None:
        """Even deleting a missing key is a write, refused by a read-only store."""
        await self.assert_refused(store, "nonexistent_key")

    async def test_clear(self, store: SessionStore) -> None:
        await self.set(store, "key", self.buffer_cls.from_bytes(b"something"))
        await self.assert_refused(store, "key")
        assert not await store.is_empty("")

    async def test_getsize_prefix(self, store: SessionStore) -> None:
        buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        keys = ["c/0/0", "c/0/1", "c/1/0", "c/1/1", "cc/0"]
        await self.set_many(store, {k: buf for k in keys})
        assert await store.getsize_prefix("c") == 4 * len(buf)

    async def test_list(self, store: SessionStore) -> None:
        assert await _collect_aiterator(store.list()) == ()
        data = self.buffer_cls.from_bytes(b"")
        items = {"foo/zarr.json": data, **{f"foo/c/{i}": data for i in range(10)}}
        await self.set_many(store, items)
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)

    async def test_list_prefix(self, store: SessionStore) -> None:
        prefixes = ("", "a/", "a/b/", "a/b/c/")
        items = {p + "zarr.json": self.buffer_cls.from_bytes(b"") for p in prefixes}
        await self.set_many(store, items)
        for prefix in prefixes:
            observed = sorted(await _collect_aiterator(store.list_prefix(prefix)))
            assert observed == sorted(k for k in items if k.startswith(prefix))

    async def test_list_empty_path(self, store: SessionStore) -> None:
        data = self.buffer_cls.from_bytes(b"")
        items = {"foo/bar/zarr.json": data, "foo/bar/c/1": data, "foo/baz/c/0": data}
        await self.set_many(store, items)
        assert sorted(await _collect_aiterator(store.list())) == sorted(items)
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == sorted(items)
        observed = sorted(await _collect_aiterator(store.list_prefix("foo/bar/")))
        assert observed == ["foo/bar/c/1", "foo/bar/zarr.json"]

    async def test_list_dir(self, store: SessionStore) -> None:
        assert await _collect_aiterator(store.list_dir("")) == ()
        b = self.buffer_cls.from_bytes
        await self.set_many(
            store,
            {
                "foo/zarr.json": b(b"bar"),
                "foo/c/1": b(b"\x01"),
                "foo/bar/foobar_first_child": b(b"1"),
                "foo/bar/foobar_second_child/zarr.json": b(b"2"),
            },
        )
        for root in ("foo", "foo/"):
            assert sorted(await _collect_aiterator(store.list_dir(root))) == [
                "bar",
                "c",
                "zarr.json",
            ]
        for root in ("foo/bar", "foo/bar/"):
            assert sorted(await _collect_aiterator(store.list_dir(root))) == [
                "foobar_first_child",
                "foobar_second_child",
            ]

    def test_set_sync(self, store: SessionStore) -> None:
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.set_sync("sync_set", self.buffer_cls.from_bytes(b"\x01"))
        assert store.get_sync("sync_set") is None

    def test_delete_sync(self, store: SessionStore) -> None:
        sync(self.set(store, "sync_delete", self.buffer_cls.from_bytes(b"\x01\x02")))
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.delete_sync("sync_delete")
        got = store.get_sync("sync_delete")
        assert got is not None and got.to_bytes() == b"\x01\x02"

    def test_delete_sync_missing(self, store: SessionStore) -> None:
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.delete_sync("nonexistent_sync")

    async def test_sync_async_set_get_parity(self, store: SessionStore) -> None:
        """Both write paths refuse; both read paths see a committed key alike."""
        buf = self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.set_sync("parity", buf)
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            await store.set("parity", buf)
        await self.set(store, "parity", buf)
        got_sync = store.get_sync("parity")
        got_async = await store.get("parity", prototype=default_buffer_prototype())
        assert got_sync is not None and got_async is not None
        assert got_sync.to_bytes() == got_async.to_bytes() == buf.to_bytes()

    async def test_delete_sync_visible_to_async_get(self, store: SessionStore) -> None:
        await self.set(store, "parity_delete", self.buffer_cls.from_bytes(b"\x01"))
        with pytest.raises(zl.ReadOnlyError, match=READ_ONLY_MESSAGE):
            store.delete_sync("parity_delete")
        assert await store.get("parity_delete", prototype=default_buffer_prototype()) is not None

    @pytest.mark.parametrize(
        "byte_range",
        [
            None,
            RangeByteRequest(1, 4),
            OffsetByteRequest(1),
            SuffixByteRequest(1),
            RangeByteRequest(10, 20),
        ],
        ids=["none", "range", "offset", "suffix", "range-past-eof"],
    )
    async def test_get_sync_byte_range_parity(
        self, store: SessionStore, byte_range: ByteRequest | None
    ) -> None:
        await self.set(store, "parity_byte_range", self.buffer_cls.from_bytes(b"\x01\x02\x03"))
        got_sync = store.get_sync("parity_byte_range", byte_range=byte_range)
        got_async = await store.get(
            "parity_byte_range", prototype=default_buffer_prototype(), byte_range=byte_range
        )
        assert got_sync is not None and got_async is not None
        assert got_sync.to_bytes() == got_async.to_bytes()

    async def test_pinned_to_its_commit(self, store: SessionStore) -> None:
        """Not in the suite: a read-only session keeps reading the commit it resolved when
        opened, whatever lands on the branch afterwards."""
        await self.set(store, "k", self.buffer_cls.from_bytes(b"old"))
        pinned = store.session
        writer = zl.Repo.of(pinned).create_session(self.branch)
        writer.write("k", b"new")
        writer.commit("overwrite")
        assert pinned.read("k") == b"old"
        assert zl.Repo.of(pinned).readonly_session(self.branch).read("k") == b"new"
