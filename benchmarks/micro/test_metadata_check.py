"""The zarr.json check every metadata write runs (zarr's own v3 classes parse the
document): time per document, on documents zarr writes itself. It should stay well under a
millisecond, since a session's metadata writes all pass through it."""

from __future__ import annotations

import numpy as np
import zarr

from zarrlake._util.zarr_metadata import check_metadata


def documents() -> list[tuple[str, bytes]]:
    """zarr.json documents of a group and of arrays with common codecs and sharding."""
    store = zarr.storage.MemoryStore()
    root = zarr.open_group(store, mode="w", attributes={"title": "t"})
    zc = zarr.codecs
    for name, kwargs in {
        "gzip": dict(dtype="f8", compressors=zc.GzipCodec(level=5), fill_value=np.nan),
        "zstd": dict(dtype="i2", compressors=zc.ZstdCodec(level=3)),
        "shard": dict(dtype="i4", shards=(4, 4), compressors=zc.ZstdCodec()),
        "text": dict(dtype=str, fill_value=""),
    }.items():
        root.create_array(name, shape=(4, 4), chunks=(2, 2), dimension_names=("y", "x"), **kwargs)
    return [(k, v.to_bytes()) for k, v in store._store_dict.items() if k.endswith("zarr.json")]


def test_metadata_check(benchmark) -> None:
    docs = documents()

    def check_all() -> set[str]:
        return {check_metadata(k, v) for k, v in docs}

    assert benchmark(check_all) == {"array", "group"}
