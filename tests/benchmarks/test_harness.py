"""The benchmark harness: a group module's workload runs in a fresh worker process by
"module:function", a `run=` group's records land in the results, targets.toml gives
every row a label, a metric and a check that decide the table, every table a group fills
has rows there, and a bucket-only engine reaches S3 alone."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from benchmarks import engines, run, targets
from benchmarks.groups import Group, Step, run_group
from benchmarks.report import markdown_table


def sample_workload(engine: Any, path: str, p: dict) -> dict:
    """A workload as a group module writes one: runs in the worker process."""
    Path(path).mkdir(parents=True, exist_ok=True)
    return {
        "engine_seen": p["engine"],
        "value": p["sample_value"],
        "has_engine": engine is not None,
    }


def test_a_steps_group_runs_module_function_workloads_in_worker_processes(tmp_path: Path):
    group = Group("SAMPLE", ["files"], [Step(f"{__name__}:sample_workload", "SAMPLE")])
    results: dict = {}
    log: list[str] = []
    run_group(group, {"reps": 2, "sample_value": 7}, tmp_path, results, log)
    assert log == []
    assert results == {
        "SAMPLE": {"files": [{"engine_seen": "files", "value": 7, "has_engine": False}] * 2}
    }


def test_a_run_group_adds_its_records_and_a_failing_one_is_logged(tmp_path: Path):
    def good(cfg: dict, work: Path) -> dict:
        assert work.is_dir()
        return {"T": {"zarrlake": [{"x": cfg["reps"]}]}}

    def bad(cfg: dict, work: Path) -> dict:
        raise RuntimeError("no such thing")

    results: dict = {}
    log: list[str] = []
    run_group(Group("GOOD", run=good), {"reps": 3}, tmp_path, results, log)
    run_group(Group("BAD", run=bad), {"reps": 3}, tmp_path, results, log)
    assert results == {"T": {"zarrlake": [{"x": 3}]}}
    assert log == ["BAD: FAILED: RuntimeError: no such thing"]


def test_every_row_of_targets_toml_renders_and_checks():
    for quick in (True, False):
        rows = targets.rows(run.sizes(quick))
        assert len(rows) > 60 and all(r.label and "{" not in r.label for r in rows)
    w1 = next(r for r in targets.rows(run.sizes(True)) if r.table == "W1")
    assert w1.check is not None
    assert w1.check({"zarrlake": 130, "icechunk": 100, "zarr": 130}, {})
    assert not w1.check({"zarrlake": 130, "icechunk": 100, "zarr": 140}, {})  # < 0.95x zarr
    lost = next(r for r in targets.rows(run.sizes(True)) if r.metric == "lost_writes")
    assert lost.check and lost.check({}, {"zarrlake": [0, 0]})
    assert not lost.check({}, {"zarrlake": [0, 1]})
    assert [r.metric for r in targets.spark_rows()][-1] == "join_ms"


def test_the_table_shows_medians_ratios_and_whether_targets_are_met():
    cfg = run.sizes(True)
    doc = {
        "mode": "quick",
        "config": cfg,
        "machine": {"nproc": 2, "cpu": "cpu", "python": "3.12", "versions": {}},
        "elapsed_s": 60,
        "command": "python -m benchmarks.run --quick --only W2",
        "failures": [],
        "results": {"W2": {"zarrlake": [{"chunks_s": 300.0}], "icechunk": [{"chunks_s": 100.0}]}},
    }
    table = markdown_table(doc)
    line = next(x for x in table.splitlines() if "x 1 KiB chunks (chunks/s)" in x)
    assert "| 300 | 100 |" in line and "| 3 |" in line and line.endswith("| >= 2x IC | yes |")
    assert "| W1 |" in table and "not run" in table  # issue 15's rows that did not run


def test_every_table_a_group_fills_has_rows_and_every_module_has_both_sizes():
    for quick in (True, False):
        cfg = run.sizes(quick)
        tables = {r.table for r in targets.rows(cfg)} | {"SPARK"}  # SPARK: its own section
        groups = run.plan(cfg)
        names = [g.name for g in groups]
        assert {"S3BUCKET", "VIRTUAL"} <= set(names) and len(names) == len(set(names))
        filled = {step.table for g in groups for step in g.steps}
        assert filled <= tables, filled - tables
    for name in run.GROUP_MODULES:
        sizes = getattr(importlib.import_module(name), "SIZES", {"full": {}, "quick": {}})
        assert sizes.keys() == {"full", "quick"} and sizes["full"].keys() == sizes["quick"].keys()


def test_group_module_notes_are_filled_and_only_for_groups_that_ran():
    cfg = run.sizes(True)
    notes = run.module_notes(cfg, {"VIRTUAL", "W1"})
    assert len(notes) == 1 and notes[0].startswith(f"VIRTUAL (issue 23): {cfg['virtual_files']} ")
    assert run.module_notes(cfg, {"W1"}) == []


def test_a_bucket_only_zarrlake_engine_names_no_metastore_and_workers_inherit_it():
    remote = {
        "s3_endpoint": "http://127.0.0.1:1",
        "bucket": "b",
        "region": "us-east-1",
        "access_key_id": "k",
        "secret_access_key": "s",
        "pg_url": "postgresql://u@127.0.0.1:2/postgres",
    }
    bucket = engines.make("zarrlake", {"backend": "bucket", "remote": remote, "loc": "rt"})
    s3pg = engines.make("zarrlake", {"backend": "s3pg", "remote": remote, "loc": "rt"})
    assert not bucket.uses_pg and s3pg.uses_pg
    where = bucket._where("/work/S3BUCKET-zarrlake-0")
    assert where["location"] == "s3://b/s3bucket_zarrlake_0_rt" and "metastore" not in where
    assert s3pg._where("/work/x")["metastore"] == "postgresql://u@127.0.0.1:2/x_rt"
    assert bucket.spawn_params() == {"backend": "bucket", "remote": remote, "loc": "rt"}
