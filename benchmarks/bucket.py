"""S3BUCKET (issue 22): a bucket-only zarrlake repository (its metastore in the bucket, on
conditional writes) against Icechunk 2.3 on the same moto S3 server.

The S3PG group's workers with `backend="bucket"` (engines.py): S3RT (s3pg.py) counts the
requests and sequential round trips of a one-chunk commit (begin + open array + write one
chunk + commit, and the commit call alone) and of open + read one chunk in a new process
through the harness's counting relay (relay.py), and times both with `rt_s3_ms` per S3
round trip; W6 (workloads.py) has 4 processes making one-chunk commits on one branch at
once (commits/s, acknowledged writes lost). Rows and targets: targets.toml, tables BKRT
and BKW6.

    python -m benchmarks.run --quick --only S3BUCKET
"""

from __future__ import annotations

from typing import Any

from benchmarks.groups import Group, Step

SIZES = {"full": {"bucket_w6_commits": 20}, "quick": {"bucket_w6_commits": 5}}
NOTE = (
    "S3 bucket (issue 22, S3BUCKET): zarrlake = s3://bucket/prefix with its metastore in the "
    "bucket (conditional writes), Icechunk = s3_storage, on one moto S3 server of their own; "
    "requests and round trips counted as for S3PG (warm-up, median over {rt_commits} "
    "commits), latency {rt_s3_ms:g} ms per S3 round trip; W6 {w6_procs} processes x "
    "{bucket_w6_commits} one-chunk commits."
)
BUCKET = {"backend": "bucket"}


def groups(cfg: dict[str, Any]) -> list[Group]:
    """One group on S3 + PostgreSQL servers of its own (PostgreSQL idle: the relays'
    check uses it), each step on a repository of its own (`loc`)."""
    return [
        Group(
            "S3BUCKET",
            ["zarrlake", "icechunk"],
            [
                Step("S3RT", "BKRT", params={**BUCKET, "loc": "rt"}),
                Step(
                    "W6",
                    "BKW6",
                    params={**BUCKET, "loc": "w6", "w6_commits": cfg["bucket_w6_commits"]},
                ),
            ],
            servers=True,
        )
    ]
