"""The bucket metastore passes the conformance suites: on memory:// storage (fast) and on
moto's S3 server, races between threads and processes and use after fork included."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

import pytest

from zarrlake.testing.metastore import MetaStoreTests
from zarrlake.testing.metastore_shared import SharedMetaStoreTests


def bucket_url(s3_location: tuple[str, dict]) -> str:
    """The bucket+s3:// URL of the metastore at an s3:// location with its options."""
    location, options = s3_location
    return f"bucket+{location}?{urlencode(options)}"


class TestBucketMetaStoreInMemory(MetaStoreTests):
    @pytest.fixture
    def store_url(self) -> str:
        return f"bucket+memory://test-{uuid.uuid4().hex}"


class TestBucketMetaStoreOnS3(MetaStoreTests, SharedMetaStoreTests):
    # A round is 16 threads' reads and swaps over HTTP to one moto process (50 s for the
    # 200 rounds); 60 rounds still make 900 losing swaps, on the path the other classes of
    # this module test at full size.
    race_rounds = 60

    @pytest.fixture
    def store_url(self, s3_location) -> str:
        return bucket_url(s3_location)
