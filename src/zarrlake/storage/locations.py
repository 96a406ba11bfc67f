"""The built-in storage drivers on obstore's own stores: memory://NAME and
s3://BUCKET/PREFIX (a local directory's driver is storage/local.py). Importing this module
registers them."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cachetools import LRUCache
from obstore.store import MemoryStore, S3Store

from zarrlake.errors import ConfigurationError, InvalidInputError
from zarrlake.storage import register
from zarrlake.storage.base import ObjectStore
from zarrlake.storage.keys import check_prefix, no_options
from zarrlake.storage.obstore import ObstoreObjectStore, s3_config, summarise

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

S3_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "endpoint_url": str,
    "region": str,
    "access_key_id": str,
    "secret_access_key": str,
    "allow_http": bool,
    "connect_timeout": (int, float),
    "request_timeout": (int, float),
    "max_retries": int,
    "retry_timeout": (int, float),
}
"""Options accepted for s3:// locations. Timeouts are in seconds; max_retries and
retry_timeout bound obstore's own HTTP-level retries of idempotent requests."""

_memory_stores: dict[str, Any] = {}
_memory_lock = threading.Lock()


def open_memory(location: str, options: dict[str, Any]) -> ObjectStore:
    """memory://NAME: one obstore MemoryStore per name, shared within this process."""
    no_options("memory://", options)
    name = location.split("://", 1)[1]
    if not name:
        raise InvalidInputError(f"invalid memory location {location!r}: use memory://NAME")
    with _memory_lock:
        store = _memory_stores.get(name)
        if store is None:
            store = _memory_stores[name] = MemoryStore()
    return ObstoreObjectStore(store, f"memory://{name}", remote=False)


def open_s3(location: str, options: dict[str, Any]) -> ObjectStore:
    """s3://BUCKET/PREFIX with the options of S3_OPTIONS."""
    unknown = sorted(set(options) - set(S3_OPTIONS))
    if unknown:
        raise InvalidInputError(
            f"unknown storage option(s) for s3://: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(S3_OPTIONS))})"
            "; use the known ones"
        )
    for name, value in options.items():
        kind = S3_OPTIONS[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidInputError(
                f"storage option {name}={value!r} has the wrong type; check its type in the docs"
            )
    endpoint = options.get("endpoint_url")
    plain = isinstance(endpoint, str) and endpoint.lower().startswith("http://")
    if plain and options.get("allow_http") is not True:
        raise InvalidInputError(
            f"S3 endpoint {endpoint} is plain HTTP; add --allow-http (or "
            "ZARRLAKE_ALLOW_HTTP=1) on the command line, or storage option allow_http=True "
            "in Python, to use it"
        )
    parts = urlsplit(location)
    bucket = parts.netloc
    if not bucket:
        raise InvalidInputError(
            f"invalid S3 location {location!r}: no bucket (s3://BUCKET/...); add the bucket"
        )
    if parts.query or parts.fragment:
        raise InvalidInputError(
            f"invalid S3 location {location!r}: no query or fragment allowed; remove them"
        )
    prefix = parts.path.strip("/")
    if prefix:
        check_prefix(prefix)

    config = s3_config(options)
    client: ClientConfig = {}
    if "allow_http" in options:
        client["allow_http"] = options["allow_http"]
    if "connect_timeout" in options:
        client["connect_timeout"] = timedelta(seconds=options["connect_timeout"])
    if "request_timeout" in options:
        client["timeout"] = timedelta(seconds=options["request_timeout"])
    retry: RetryConfig = {"max_retries": options.get("max_retries", 3)}
    retry["retry_timeout"] = timedelta(seconds=options.get("retry_timeout", 30))
    # Conditional creates go through a client that never retries at the HTTP level: a lost
    # response must surface as TransientError, not be retried into a false "already exists".
    no_retry: RetryConfig = {"max_retries": 0, "retry_timeout": retry["retry_timeout"]}
    url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    try:
        store = _s3_client(bucket, prefix, config, client, retry)
    except Exception as exc:  # obstore raises its own types and ValueError
        raise ConfigurationError(f"cannot configure {url}: {summarise(exc)}") from exc
    recipe = (location, tuple(sorted(options.items())))
    return ObstoreObjectStore(
        store,
        url,
        create_store=lambda: _s3_client(bucket, prefix, config, client, no_retry),
        recipe=recipe,
    )


_s3_clients: LRUCache[str, Any] = LRUCache(maxsize=32)


def _s3_client(
    bucket: str, prefix: str, config: S3Config, client: ClientConfig, retry: RetryConfig
) -> Any:
    """One S3Store per configuration (the last 32) in a process: making one costs
    milliseconds (its HTTP client loads TLS roots), and they are safe to share."""
    key = repr((bucket, prefix, sorted(config.items()), sorted(client.items()), retry))
    with _memory_lock:
        found = _s3_clients.get(key)
        if found is None:
            found = _s3_clients[key] = S3Store(
                bucket,
                prefix=prefix or None,
                config=config,
                client_options=client,
                retry_config=retry,
            )
        return found


register("memory", open_memory)
register("s3", open_s3)
