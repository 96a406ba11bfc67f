"""Local directories (a path or file:///abs/path; importing this module registers the
driver): obstore's LocalStore, except that objects of plain keys are read,
written and deleted on their file directly, and keys listed by walking the directory.
obstore hands local calls to its async runtime, which here costs about three times a plain
read of a 1 MiB object (benchmark W3) and twice a plain write of a small one (each commit
writes four); its listing stats every file for metadata a key listing does not use (a full
gc lists every object)."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import random
import re
import shutil
import stat
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

from zarrlake.errors import REPORT_BUG, ConfigurationError, InvalidInputError, NotFoundError
from zarrlake.storage import register
from zarrlake.storage.base import ByteRange, ObjectStore
from zarrlake.storage.keys import no_options
from zarrlake.storage.obstore import ObstoreObjectStore, summarise

_PLAIN = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
"""Keys whose file path is the key itself (obstore escapes other characters its own way)."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""File names that are a key's segment as they are (obstore's half-written files end in
`#<n>`, which this excludes)."""
DIRECT_WRITE_MAX = 256 << 10
"""Chunks and fragments up to this size are written directly; larger ones through obstore,
whose one call holds no GIL for the whole write (written in Python, a 1 MiB chunk's open,
write, link and unlink each wait for the GIL again among zarr's encoding threads: 5-10%
slower, W1). Other objects are written directly at any size: the manifests, snapshots and
records a commit writes (a manifest range of 4,096 entries is about 300 KB) are written
from zarrlake's own threads, not among zarr's, and a commit then never loads obstore (its
import and first call cost 6-15 ms, seen inside a 100,000-chunk commit)."""
VIA_OBSTORE = ("chunks/", "fragments/")
"""The objects written among zarr's encoding threads: over DIRECT_WRITE_MAX, through obstore."""
_PLAIN_BYTES = (string.ascii_letters + string.digits + "._-").encode()
"""The characters of a plain key segment (what `_PLAIN_NAME` matches)."""
BINS = "gc-sweeps"
"""Where a garbage collector's sweeps keep the objects they delete until they end (`open_bin`)."""
SEALED = ".sealed-"
"""What a bin is renamed to (with random bits) once another process ended its sweep."""


class LocalObjectStore(ObstoreObjectStore):
    """Objects as files under a local directory; whole plain files are read directly (faster than
    obstore).

    A directory has no conditional updates, so its metastore must be SQLite, not the bucket."""

    def __init__(self, root: Path) -> None:
        super().__init__(None, root.as_uri(), recipe=(str(root), ()), remote=False)
        self.root = root
        self._root = str(root)

    @functools.cached_property
    def store(self) -> Any:
        """obstore's LocalStore on the directory, made at the first call that needs it
        (a key that is not plain, a large write, a listing it must unescape): opening and
        reading a repository of plain keys never imports obstore."""
        from obstore.store import LocalStore

        try:
            return LocalStore(self.root, mkdir=True)
        except Exception as exc:  # obstore raises its own types, and OSError
            raise ConfigurationError(
                f"cannot open directory {self._root!r}: {summarise(exc)}"
            ) from exc

    def _get(self, key: str, byte_range: ByteRange | None) -> bytes:
        if not _PLAIN.fullmatch(key):  # keys are checked: no ".."
            return super()._get(key, byte_range)
        try:
            with open(f"{self._root}/{key}", "rb") as f:  # (a str: no Path made per read)
                if byte_range is None:
                    return f.read()
                start, end = byte_range  # past the end: clamped, as zarr wants
                return os.pread(f.fileno(), end - start, start) if end > start else b""
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None
        except OSError as exc:
            self._raise(exc, "GET", key)

    def _exists(self, key: str) -> bool:
        """Whether a plain key's file is there (a stat, not obstore's HEAD: opening a
        repository and reading its history never loads obstore)."""
        if not _PLAIN.fullmatch(key):
            return super()._exists(key)
        try:
            return stat.S_ISREG(os.stat(f"{self._root}/{key}").st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            self._raise(exc, "HEAD", key)

    def _put(self, key: str, data: bytes | memoryview) -> None:
        if not self._direct(key, data):
            return super()._put(key, data)
        self._place(key, data, os.replace)

    def _put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        if not self._direct(key, data):
            return super()._put_if_absent(key, data)
        return self._place(key, data, os.link)

    @staticmethod
    def _direct(key: str, data: bytes | memoryview) -> bool:
        """Whether the object is written on its file here (see DIRECT_WRITE_MAX)."""
        if len(data) > DIRECT_WRITE_MAX and key.startswith(VIA_OBSTORE):
            return False
        return _PLAIN.fullmatch(key) is not None

    def _place(self, key: str, data: bytes | memoryview, move: Callable[[str, str], None]) -> bool:
        """Write a staged file, then `move` it to the key's path: `os.replace` for a put,
        `os.link` for a create, which fails atomically when the object exists (as obstore's
        local create does); False then."""
        path = f"{self._root}/{key}"
        staged = self._stage(key, path, data)
        renamed = False  # (a put's file is renamed away; a create's link leaves it there)
        try:
            move(staged, path)
            renamed = move is os.replace
            return True
        except FileExistsError:
            if os.path.isdir(path):  # a directory of other objects: no object can be there
                self._put_failed(IsADirectoryError(errno.EISDIR, "Is a directory"), key)
            return False
        except OSError as exc:
            self._put_failed(exc, key)
        finally:
            if not renamed:
                self._unlink_quietly(staged)

    def _stage(self, key: str, path: str, data: bytes | memoryview) -> str:
        """`data` in a new file beside `path`, named as obstore names a half-written object
        (`<key>#<n>`: listings leave it out); its parent directories are made if missing."""
        # A random name (O_EXCL refuses a clash): the process's generator, reseeded in a
        # forked child, where `secrets` would read the kernel's entropy on every object.
        staged = f"{path}#{random.getrandbits(32)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            try:
                fd = os.open(staged, flags, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(staged, flags, 0o644)
        except OSError as exc:
            self._put_failed(exc, key)
        try:
            try:  # on the descriptor: a buffered file object costs more than the write
                rest = memoryview(data)
                while rest:
                    rest = rest[os.write(fd, rest) :]
            finally:
                os.close(fd)
        except OSError as exc:
            self._unlink_quietly(staged)
            self._put_failed(exc, key)
        return staged

    def _put_failed(self, exc: OSError, key: str) -> NoReturn:
        """Raise the error obstore's local put raises for `exc` (a file where a directory is
        wanted, or the reverse, is a path clash; see ObstoreObjectStore._error)."""
        if exc.errno in (errno.ENOTDIR, errno.EISDIR):
            exc = OSError(f"(os error {exc.errno}) {exc}")
        self._raise(exc, "PUT", key)

    @staticmethod
    def _unlink_quietly(path: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _delete_many(self, keys: list[str]) -> None:
        """Unlink the files of plain keys directly (about twice as fast as obstore's local
        deletes, which a gc makes one per garbage object); a missing file is no error, as
        with obstore. Other keys, and errors other than a missing file, go through obstore."""
        rest = []
        for key in keys:
            if not _PLAIN.fullmatch(key):
                rest.append(key)
                continue
            try:
                os.unlink(f"{self._root}/{key}")  # a string: a Path join costs more than the unlink
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone already, or no object can exist there
            except OSError:
                rest.append(key)  # obstore's error for it
        if rest:
            super()._delete_many(rest)

    # bins: a garbage collector's fenced deletes ---------------------------------------------

    def bin_path(self, name: str) -> str:
        """The directory of bin `name`."""
        return f"{self._root}/{BINS}/{name}"

    def open_bin(self, name: str) -> None:
        """Make bin `name`, where a sweep moves what it deletes (see `move_to_bin`)."""
        os.makedirs(self.bin_path(name), exist_ok=True)

    def move_to_bin(self, name: str, keys: list[str]) -> list[str] | None:
        """Move each object into bin `name`, by one rename each, which needs the bin to
        exist at that instant; the keys moved (a missing one is skipped), or None as soon
        as the bin is gone: another process sealed it (`seal_bin`), and from then on
        nothing can enter it. This is the fence a paused collector meets: a rename it
        sends after the seal fails, and what it moved before is put back by the seal."""
        home = self.bin_path(name)
        moved = []
        for key in keys:
            if not _PLAIN.fullmatch(key):
                raise ConfigurationError(
                    f"a sweep moves plain keys only, not {key!r}; {REPORT_BUG}"
                )
            target = f"{home}/{key}"
            for attempt in (0, 1):
                try:
                    os.rename(f"{self._root}/{key}", target)
                    moved.append(key)
                    break
                except FileNotFoundError:
                    if not os.path.isdir(home):
                        return None  # sealed
                    if attempt or os.path.isdir(os.path.dirname(target)):
                        break  # the object is gone already
                    if not self._bin_dirs(home, key):
                        return None
        return moved

    @staticmethod
    def _bin_dirs(home: str, key: str) -> bool:
        """Make the directories of `key` inside bin `home` one level at a time (never the
        bin itself, which must not come back once sealed); False if the bin is gone."""
        path = home
        for part in key.split("/")[:-1]:
            path = f"{path}/{part}"
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            except FileNotFoundError:
                return False
        return True

    def seal_bin(self, name: str) -> None:
        """End bin `name` for its sweep: rename it away (no `move_to_bin` can enter it from
        then on), then put back every object it holds that is missing (a copy present
        already holds the same bytes: content-addressed), and remove it. Safe to repeat, by
        any number of processes at once."""
        import glob
        import secrets

        home = self.bin_path(name)
        with contextlib.suppress(FileNotFoundError):
            os.rename(home, f"{home}{SEALED}{secrets.token_hex(4)}")
        for sealed in glob.glob(f"{glob.escape(home)}{SEALED}*"):
            self._restore(sealed)
            shutil.rmtree(sealed, ignore_errors=True)

    def _restore(self, sealed: str) -> None:
        for folder, _, files in os.walk(sealed):
            for file in files:
                item = os.path.join(folder, file)
                key = os.path.relpath(item, sealed).replace(os.sep, "/")
                target = f"{self._root}/{key}"
                os.makedirs(os.path.dirname(target), exist_ok=True)
                # fails if present (written again meanwhile) or taken by another seal
                with contextlib.suppress(FileExistsError, FileNotFoundError):
                    os.link(item, target)
                self._unlink_quietly(item)

    def empty_bin(self, name: str) -> None:
        """Delete bin `name` with what it holds: its sweep ended itself, so nobody will
        ask for them back (a sealed bin is another process's to empty)."""
        shutil.rmtree(self.bin_path(name), ignore_errors=True)

    def bins(self) -> list[str]:
        """The names of the bins present, sealed ones included (with their suffix)."""
        try:
            return sorted(os.listdir(f"{self._root}/{BINS}"))
        except FileNotFoundError:
            return []

    def _list(self, prefix: str) -> Iterator[str]:
        """The keys under `prefix`, from the directory's entries (no stat per file); through
        obstore when some name is not a plain key segment (escaped by obstore)."""
        keys = self._walk(prefix)
        return super()._list(prefix) if keys is None else iter(keys)

    def _walk(self, prefix: str) -> list[str] | None:
        """Every key under `prefix` (as a string), or None if a name needs obstore's
        unescaping. Half-written files (`<key>#<n>`) are left out, as obstore does."""
        parent = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        if parent and not _PLAIN.fullmatch(parent):
            return None
        keys: list[str] = []
        names: list[str] = []  # every file name listed, checked at once below
        todo = [parent]
        while todo:
            rel = todo.pop()
            try:
                with os.scandir(self.root / rel if rel else self.root) as entries:
                    for entry in entries:
                        name = entry.name
                        key = f"{rel}/{name}" if rel else name
                        if entry.is_dir(follow_symlinks=False):
                            if _PLAIN_NAME.fullmatch(name) is None:
                                return None
                            if key.startswith(prefix) or prefix.startswith(key + "/"):
                                todo.append(key)
                        elif "#" in name:
                            continue
                        else:
                            names.append(name)
                            if key.startswith(prefix):
                                keys.append(key)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self._raise(exc, "LIST", prefix)
        # all names checked at once (a full gc lists every object): a character outside
        # plain key segments sends the whole listing through obstore's unescaping
        if "".join(names).encode("utf-8", "surrogateescape").translate(None, _PLAIN_BYTES):
            return None
        return keys

    def _get_tagged(self, key: str) -> tuple[bytes, str]:
        raise self._no_updates()

    def _tag(self, key: str) -> str:
        raise self._no_tags()

    def _delete_if(self, key: str, tag: str) -> bool:
        raise self._no_tags()

    def _retag(self, key: str) -> str:
        raise self._no_tags()

    def _no_tags(self) -> ConfigurationError:
        return ConfigurationError(
            f"a local directory ({self.root}) has no entity tags: its deletes are fenced by "
            "bins (open_bin, move_to_bin, seal_bin)"
        )

    def _put_if(self, key: str, data: bytes, tag: str | None) -> str:
        raise self._no_updates()

    def _no_updates(self) -> ConfigurationError:
        return ConfigurationError(
            f"a local directory ({self.root}) has no conditional updates (replace-if-unchanged); "
            "its metastore is SQLite (the default): leave metastore unset or use sqlite:///..."
        )


def open_local(location: str, options: dict[str, Any]) -> ObjectStore:
    """A local directory (created if missing): a path, or file:///absolute/path."""
    no_options("a local directory", options)
    if location.lower().startswith("file://"):
        parts = urlsplit(location)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidInputError(
                f"invalid file URL {location!r}: use file:///absolute/path (no host or query)"
            )
        path = Path(unquote(parts.path))
        if not path.is_absolute() or not parts.path:
            raise InvalidInputError(f"invalid file URL {location!r}: path must be absolute")
    else:
        path = Path(location).expanduser()
    path = path.resolve()
    if path.is_dir():  # (one stat when it is there, as when a repository is opened)
        return LocalObjectStore(path)
    if path.exists():
        raise ConfigurationError(
            f"storage location {str(path)!r} exists and is not a directory; give a directory"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"cannot open directory {str(path)!r}: {exc}") from exc
    return LocalObjectStore(path)


register("file", open_local)
