"""Shared fixtures. Real servers (PostgreSQL, the S3-compatible moto server) are started once
per test run by the plugins below and stopped by PID afterwards."""

from __future__ import annotations

import pytest

# The shared helpers assert too: rewrite them like test modules, for readable failures.
pytest.register_assert_rewrite("tests.helpers")

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.spark",
    "tests.fixtures.metastores",
    "tests.fixtures.figures",
    "tests.fixtures.schedule",
    "tests.fixtures.dask",
]
