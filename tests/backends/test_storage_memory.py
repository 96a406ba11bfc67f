"""memory:// object storage passes the conformance suites."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from zarrlake.testing.storage import ObjectStoreTests
from zarrlake.testing.storage_conditional import ConditionalObjectStoreTests
from zarrlake.testing.storage_retries import RetriedObjectStoreTests


class TestMemoryObjectStore(ObjectStoreTests, RetriedObjectStoreTests, ConditionalObjectStoreTests):
    @pytest.fixture
    def location(self) -> tuple[str, dict[str, Any]]:
        return f"memory://conformance-{uuid.uuid4().hex}", {}
