"""The codec pipeline zarr uses once a session store exists in the process: zarr's default
(`BatchedCodecPipeline`) with two additions for arrays on a session store, and nothing
changed for other stores.

- A read whose chunk bytes the codecs cannot decode raises `UndecodableChunkError` naming
  the array, the chunk's coordinates and the codec's message (zarr would raise the codec's
  bare `RuntimeError` or `ValueError`).
- After an array write, the store is told (`array_written`): a Dask task's copy of a
  session finishes there, so the task's writes are durable and counted when it returns.

`install` makes it zarr's pipeline unless the process chose another one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from zarr.core.codec_pipeline import BatchedCodecPipeline

from zarrlake.errors import ZarrLakeError

DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"


class SessionPipeline(BatchedCodecPipeline):
    """zarr's batched codec pipeline, naming undecodable chunks of session stores and
    telling them when an array write is done."""

    async def read(
        self, batch_info: Iterable[Any], out: Any, drop_axes: tuple[int, ...] = ()
    ) -> Any:  # type: ignore[override]
        """zarr's read; a chunk of a session store that does not decode raises
        UndecodableChunkError naming it."""
        batch = list(batch_info)
        try:
            return await super().read(batch, out, drop_axes)
        except ZarrLakeError:
            raise
        except Exception as e:
            found = await self._undecodable(batch)
            if found is None:
                raise
            raise found from e

    async def write(
        self, batch_info: Iterable[Any], value: Any, drop_axes: tuple[int, ...] = ()
    ) -> None:  # type: ignore[override]
        """zarr's write, then each session store written to hears that it is done."""
        batch = list(batch_info)
        await super().write(batch, value, drop_axes)
        stores = [getattr(item[0], "store", None) for item in batch]  # (inner pipelines of
        # a sharding codec write through shard byte setters: no store)
        for store in {id(s): s for s in stores if s is not None}.values():
            written = getattr(store, "array_written", None)
            if written is not None:
                await written()

    async def _undecodable(self, batch: list[Any]) -> ZarrLakeError | None:
        """The error naming the first chunk of `batch` on a session store that does not
        decode (and how many more do not), or None if each decodes alone."""

        async def attempt(item: Any) -> tuple[Any, Exception] | None:
            getter, spec = item[0], item[1]
            if getattr(getattr(getter, "store", None), "undecodable", None) is None:
                return None
            data = await getter.get(prototype=spec.prototype)
            if data is None:
                return None
            try:
                await self.decode([(data, spec)])
            except ZarrLakeError:
                return None  # the store's own error (checksum, missing object): not this
            except Exception as e:
                return getter, e
            return None

        failed = [f for f in await asyncio.gather(*(attempt(i) for i in batch)) if f]
        if not failed:
            return None
        getter, error = failed[0]
        return await getter.store.undecodable(getter.path, error, len(failed) - 1)


_INSTALLED: list[bool] = []


def install() -> None:
    """Make SessionPipeline zarr's codec pipeline, unless the process configured another
    one than zarr's default (then reads raise the codecs' own errors, and a Dask task's
    copy of a session finishes when it is collected instead)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    import zarr
    from zarr.registry import register_pipeline

    register_pipeline(SessionPipeline)
    if zarr.config.get("codec_pipeline.path") == DEFAULT:
        zarr.config.set({"codec_pipeline.path": f"{__name__}.{SessionPipeline.__name__}"})
