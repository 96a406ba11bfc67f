"""Checks: rules stored in the metastore that gate what lands on a branch (see
zarrlake.checks for the public face)."""
