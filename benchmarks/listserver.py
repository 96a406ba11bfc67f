"""The LIST group's own moto S3 server: a child process that fills one bucket through moto's
backend (in this process, not over HTTP) and then serves it over HTTP for the listings.

Two things differ from the moto server the other groups use, both in this process only and
both about moto's Python, not about the client measured:

- the objects are put by calling `S3Backend.put_object` in a loop (moto's own objects, the
  same `FakeKey` a PUT request makes), about 2,500 a second, where moto's HTTP server takes
  about 120 PUT requests a second on this machine: a million objects in minutes, not hours;
- `S3Backend.list_objects_v2` without a delimiter answers from a sorted index of the
  bucket's keys (built once after the fill, bisected per request), where moto walks,
  filters and sorts every key of the bucket for each page: a page of 1,000 of a million
  keys then costs what a page costs on S3, not a sort of the million. Pages, their
  contents, continuation tokens and the XML are moto's own (its `_truncate_result` and
  handler code); listings with a delimiter go to moto's code unchanged;
- that handler's result (the dict moto builds: keys, sizes, ETags, times, token) is written
  as S3's XML by a template here, where moto's generic serializer parses every key's
  timestamp back through dateutil (about a millisecond a key: 1.7 s a page of 1,000).

    python -m benchmarks.listserver BUCKET N  # prints {"port": ...}; serves until stdin closes
"""

from __future__ import annotations

import bisect
import hashlib
import json
import sys
import time
from typing import Any

REGION = "us-east-1"


def object_key(i: int) -> str:
    """The i-th object's key: a content-hash name as chunk objects have."""
    return f"listing/chunks/{hashlib.sha256(str(i).encode()).hexdigest()}"


def _indexed_listing(backend_cls: Any) -> None:
    """Give `backend_cls.list_objects_v2` a sorted index of each bucket's keys (rebuilt
    when the bucket's number of keys changed: the bucket is filled once, then listed)."""
    original = backend_cls.list_objects_v2
    index: dict[str, tuple[int, list[str]]] = {}

    def list_objects_v2(
        self: Any,
        bucket: Any,
        prefix: str | None,
        delimiter: str | None,
        continuation_token: str | None,
        start_after: str | None,
        max_keys: int,
    ) -> Any:
        if delimiter:
            return original(
                self, bucket, prefix, delimiter, continuation_token, start_after, max_keys
            )
        known = index.get(bucket.name)
        if known is None or known[0] != len(bucket.keys):
            known = (len(bucket.keys), sorted(bucket.keys.keys()))
            index[bucket.name] = known
        names = known[1]
        prefix = prefix or ""
        # as moto: a continuation token stands for the last key it returned
        after = (
            self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        )
        at = bisect.bisect_right(names, after) if after else 0
        at = max(at, bisect.bisect_left(names, prefix))
        page = []
        for name in names[at : at + max_keys + 1]:  # one more tells whether it is truncated
            if not name.startswith(prefix):
                break
            page.append(bucket.keys[name])
        return self._truncate_result(page, max_keys)

    backend_cls.list_objects_v2 = list_objects_v2


def _rendered_listing(response_cls: Any) -> None:
    """Render ListObjectsV2 results (the dict moto's handler builds) as S3's XML directly:
    moto's generic serializer parses each key's timestamp back through dateutil, about a
    millisecond a key, 1.7 s a page of 1,000 on this machine."""
    from xml.sax.saxutils import escape

    original = response_cls.serialized

    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if self.data.get("Action") != "ListObjectsV2" or not isinstance(result, dict):
            return original(self, action_result)
        if "Delimiter" in result or "EncodingType" in result:
            return original(self, action_result)
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
            f"<Name>{escape(result['Name'])}</Name><Prefix>{escape(result['Prefix'])}</Prefix>",
            f"<MaxKeys>{result['MaxKeys']}</MaxKeys><KeyCount>{result['KeyCount']}</KeyCount>",
            f"<IsTruncated>{str(result['IsTruncated']).lower()}</IsTruncated>",
        ]
        for item in result["Contents"]:
            parts.append(
                f"<Contents><Key>{escape(item['Key'])}</Key>"
                f"<LastModified>{item['LastModified']}</LastModified>"
                f"<ETag>{escape(item['ETag'])}</ETag><Size>{item['Size']}</Size>"
                f"<StorageClass>{item['StorageClass']}</StorageClass></Contents>"
            )
        for tag in ("NextContinuationToken", "StartAfter"):
            if tag in result:
                parts.append(f"<{tag}>{escape(result[tag])}</{tag}>")
        parts.append("</ListBucketResult>")
        headers = {"Content-Type": "application/xml", **self.response_headers}
        return 200, headers, "".join(parts)

    response_cls.serialized = serialized


def main() -> None:
    bucket_name, n = sys.argv[1], int(sys.argv[2])
    from moto import settings
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import S3Backend, s3_backends
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    # read from the environment at every FakeKey (a third of a put's time): read it once
    buffer_size = settings.get_s3_default_key_buffer_size()
    settings.get_s3_default_key_buffer_size = lambda: buffer_size
    _indexed_listing(S3Backend)
    _rendered_listing(S3Response)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket(bucket_name, REGION)
    t0 = time.perf_counter()
    for i in range(n):
        backend.put_object(bucket_name, object_key(i), b"x", disable_notification=True)
    fill_s = time.perf_counter() - t0
    statm = open("/proc/self/statm").read().split()  # noqa: SIM115 - one read
    rss = int(statm[1]) * 4096
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    print(json.dumps({"port": port, "fill_s": fill_s, "rss": rss}), flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop()


if __name__ == "__main__":
    main()
