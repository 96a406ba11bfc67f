"""The in-memory metastore passes the conformance suite."""

from __future__ import annotations

import uuid

import pytest

from zarrlake.testing.metastore import MetaStoreTests


class TestMemoryMetaStore(MetaStoreTests):
    @pytest.fixture
    def store_url(self) -> str:
        return f"memory://test-{uuid.uuid4().hex}"
