"""Single-client compare-and-swap round trip of each metastore backend: one `set_if`
incrementing a counter, with the version taken from the previous answer (no re-read)."""

from __future__ import annotations

import uuid

from zarrlake.metastore import open_metastore


def test_cas_round_trip(benchmark, metastore_url: str) -> None:
    meta = open_metastore(metastore_url)
    partition = f"bench-{uuid.uuid4().hex}"
    state = {"version": meta.set_if(partition, b"counter", b"0", None), "n": 0}
    for i in range(50):  # warm up connections and prepared statements
        state["version"] = meta.set_if(partition, b"counter", str(i).encode(), state["version"])

    def cas() -> None:
        state["n"] += 1
        state["version"] = meta.set_if(
            partition, b"counter", str(state["n"]).encode(), state["version"]
        )

    try:
        benchmark(cas)
        assert meta.get(partition, b"counter") == (str(state["n"]).encode(), state["version"])
    finally:
        meta.drop_partition(partition)
        meta.close()
