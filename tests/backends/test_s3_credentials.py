"""S3 without credentials: obstore falls back to the instance-metadata endpoint
(169.254.169.254), and that failure is reported as what it is: no credentials were found,
with how to give them and the bucket named, not as "permission denied" by the bucket."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

import zarrlake as zl
from tests.fixtures.s3 import s3_client
from zarrlake.errors import ConfigurationError
from zarrlake.storage.obstore import ObstoreObjectStore

DENIED_BY_IMDS = (
    "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in "
    "15.976015ms - Server returned non-2xx status code: 403 Forbidden: resolve_deny: denied "
    'destination\n\nDebug source:\nGeneric {\n    store: "S3",\n}'
)
"""obstore's error where the metadata endpoint refuses (as on a machine outside EC2 behind
a proxy): the 403 comes from the endpoint, not from the bucket."""


def closed_port() -> int:
    """A local TCP port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS variable but the CA bundle; the metadata endpoint a closed local port, so
    obstore's fallback fails at once instead of waiting on 169.254.169.254."""
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{closed_port()}")


def assert_says_how_to_give_credentials(message: str, bucket: str) -> None:
    assert message.startswith(f"no S3 credentials found for bucket {bucket!r}"), message
    for hint in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "access_key_id", "--profile"):
        assert hint in message, (hint, message)
    assert "permission denied" not in message and "\n" not in message, message


def test_a_repository_on_s3_without_credentials_says_none_were_found(
    s3_server: str, no_credentials: None
) -> None:
    bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    options = {"endpoint_url": s3_server, "allow_http": True}
    with pytest.raises(ConfigurationError) as info:
        zl.Repo.create(f"s3://{bucket}/repo", storage_options=options)
    assert_says_how_to_give_credentials(str(info.value), bucket)
    assert f"s3://{bucket}/repo" in str(info.value)


def test_the_metadata_endpoint_refusing_is_no_credentials_not_a_refusal_by_the_bucket() -> None:
    store = ObstoreObjectStore(None, "s3://weather/repo")
    error = store._error(RuntimeError(DENIED_BY_IMDS), "GET", "refs/main")
    assert isinstance(error, ConfigurationError)
    assert_says_how_to_give_credentials(str(error), "weather")
    assert "169.254.169.254" not in str(error)


def test_a_virtual_source_on_s3_without_credentials_says_none_were_found(
    s3_server: str, no_credentials: None
) -> None:
    """The same message where virtual chunks are read from their files on S3: when a file
    is imported (its identity) and when a chunk is read."""
    from zarrlake.storage.sources import SourceReader

    bucket = f"zarrlake-test-{uuid.uuid4().hex[:16]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    reader = SourceReader({"endpoint_url": s3_server, "allow_http": True})
    url = f"s3://{bucket}/archive/day0.nc"
    with pytest.raises(ConfigurationError) as info:
        reader.identity(url)
    assert_says_how_to_give_credentials(str(info.value), bucket)
    with pytest.raises(ConfigurationError) as info:
        reader.read(url, 0, 10, "size=10;etag=x")
    assert_says_how_to_give_credentials(str(info.value), bucket)
