"""Shared fixtures. Real servers (PostgreSQL, the S3-compatible moto server) are started once
per test run by the plugins below and stopped by PID afterwards."""

from __future__ import annotations

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.s3", "tests.fixtures.spark"]
