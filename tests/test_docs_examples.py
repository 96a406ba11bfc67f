"""Every code example of the README and of the documentation site runs as written, each in a
fresh directory, as the user would run it (a script: worker processes import it; the
deployment examples with their placeholders filled in with this run's S3 and PostgreSQL
servers). EXAMPLES lists them all, so a new example needs a test here."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import zarr

import zarrlake as zl
from tests.fixtures.s3 import s3_client
from tests.helpers.examples import code_blocks, filled, pages, run_script, snippet

EXAMPLES = [
    ("README.md", "sh", "Quick start"),
    ("README.md", "python", "Quick start"),
    ("docs/concepts.md", "python", "When a worker or the committer dies"),
    ("docs/concepts.md", "python", "Merging branches"),
    ("docs/getting-started.md", "sh", "A first repository"),
    ("docs/how-to/dask.md", "python", "Dask"),
    ("docs/how-to/dask.md", "python", "When a worker dies"),
    ("docs/how-to/deployment.md", "python", "One machine"),
    ("docs/how-to/deployment.md", "python", "Many machines, one bucket"),
    ("docs/how-to/deployment.md", "python", "Many machines with PostgreSQL"),
    ("docs/how-to/deployment.md", "sh", "Many machines with PostgreSQL"),
    ("docs/how-to/lifecycle.md", "python", "Garbage collection and expiry"),
    ("docs/how-to/managing-data.md", "python", "Moving and renaming"),
    ("docs/how-to/managing-data.md", "python", "Squashing history"),
    ("docs/how-to/managing-data.md", "python", "Clone and pull"),
    ("docs/how-to/managing-data.md", "python", "Export"),
    ("docs/how-to/managing-data.md", "python", "Purge"),
    ("docs/how-to/checks.md", "python", "Checks"),
    ("docs/how-to/multiprocessing.md", "python", "Multiprocessing and orchestrators"),
    ("docs/how-to/multiprocessing.md", "python", "When a worker dies"),
    ("docs/how-to/pull-requests.md", "python", "The daily flow"),
    ("docs/how-to/pull-requests.md", "python", "A daily Spark job, on one machine or on a bucket"),
    ("docs/how-to/pull-requests.md", "sh", "From the command line"),
    ("docs/how-to/spark.md", "python", "Spark"),
    ("docs/how-to/statistics.md", "python", "Chunk statistics"),
    ("docs/how-to/statistics.md", "sh", "From the command line"),
    ("docs/how-to/spark.md", "python", "Append a day"),
    (
        "docs/how-to/virtual.md",
        "python",
        "Virtual chunks: NetCDF/HDF5 archives versioned where they lie",
    ),
    ("docs/how-to/xarray.md", "python", "xarray"),
]
"""(page, language, section) of every fenced block with a language, in page order. The
site shows the README's set-up and quick start through includes, so they are listed once."""

NOT_RUN = {
    ("README.md", "sh", "Quick start"): "make demo / make test build the virtualenv this "
    "suite runs in, and make test is this suite (the demo has its own tests in tests/demo)",
}
"""The only examples no test runs, and why."""

VENV_BIN = str(Path(sys.executable).parent)


def test_every_example_of_the_readme_and_the_site_is_listed():
    found = [
        (page, kind, section)
        for page in pages()
        for kind in ("python", "sh", "bash", "console", "text", "pycon", "py")
        for section, _ in code_blocks(page, kind)
    ]
    assert sorted(found) == sorted(EXAMPLES)
    assert set(NOT_RUN) <= set(EXAMPLES)


def test_no_example_writes_outside_its_directory():
    """Examples use relative paths, so running them here leaves nothing elsewhere."""
    for page, kind, section in EXAMPLES:
        code = snippet(page, section, kind=kind)
        assert "/tmp/" not in code and '"/data' not in code, (page, section)


def test_the_merge_example_runs_as_written(tmp_path):
    res = run_script(snippet("docs/concepts.md", "Merging branches"), tmp_path)
    assert res.stdout.split("\n")[:3] == ["2", "[1. 1. 2. 2.]", "Top rows on dev"]


def test_the_getting_started_commands_run_after_the_quick_start(tmp_path):
    run_script(snippet("README.md", "Quick start"), tmp_path)
    shell = snippet("docs/getting-started.md", "A first repository", kind="sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRLAKE_")}
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    res = subprocess.run(
        ["bash", "-ec", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "Fix the first row" in res.stdout and "Add temperature" in res.stdout
    assert "temperature" in res.stdout and "[0. 1. 2.]" in res.stdout


def test_the_expiry_example_runs_after_the_quick_start(tmp_path):
    run_script(snippet("README.md", "Quick start"), tmp_path)
    res = run_script(snippet("docs/how-to/lifecycle.md", "Garbage collection and expiry"), tmp_path)
    assert [int(n) >= 0 for n in res.stdout.split()] == [True] * 3


def test_the_move_and_squash_examples_run_as_written(tmp_path):
    page = "docs/how-to/managing-data.md"
    res = run_script(snippet(page, "Moving and renaming"), tmp_path)
    assert res.stdout.splitlines() == [
        "[0. 1. 2.]",
        "{'raw/temperature': 'curated/t2m'}",
        "['curated/t2m', 'raw/temperature']",
    ]
    res = run_script(snippet(page, "Squashing history"), tmp_path)
    assert res.stdout.splitlines() == [
        "['Corrections 1-3', 'Create t2m']",
        "[30. 30. 30. 30.]",
        "3",
    ]


def test_the_spark_example_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    """In this process, where its getOrCreate() finds the test run's Spark session."""
    monkeypatch.chdir(tmp_path)
    code = snippet("docs/how-to/spark.md", "Spark")
    exec(compile(code, "docs/how-to/spark.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.split() == ["ingest", "2000"]
    assert zl.Repo.open(tmp_path / "zl-spark-demo").log(limit=1)[0].message == "ingest"


def test_the_statistics_how_to_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    """In this process, where its getOrCreate() finds the test run's Spark session; then its
    commands, on the repository it made."""
    monkeypatch.chdir(tmp_path)
    page = "docs/how-to/statistics.md"
    code = snippet(page, "Chunk statistics")
    exec(compile(code, page, "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("{'day': 3, 'nan_count': 10, 'min': 310.50")
    assert out[1:] == ["3 60", "60", "gaps True 0 4", "range True 0 4"]
    shell = snippet(page, "From the command line", kind="sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRLAKE_")}
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    res = subprocess.run(
        ["bash", "-ec", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "t2m at main: 4 chunks (4 with statistics)" in res.stdout
    assert "every chunk on main has statistics" in res.stdout


def _on_a_bucket(code: str, s3_server: str, directory: str, prefix: str):
    """`code` with its directory location (`directory`) replaced by `prefix` in a new bucket
    of the S3 server, and its storage options: (code, location, storage)."""
    bucket = f"docs-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    storage = {
        "endpoint_url": s3_server,
        "region": "us-east-1",
        "access_key_id": "test",
        "secret_access_key": "test",
        "allow_http": True,
    }
    location = f"s3://{bucket}/{prefix}"
    given = f'location, storage = os.path.abspath("{directory}"), {{}}'
    return (
        filled(code, {given: f'location, storage = "{location}", {storage!r}'}),
        location,
        storage,
    )


def test_the_spark_daily_append_runs_on_a_directory_and_on_a_bucket(
    spark, s3_server, tmp_path, monkeypatch, capsys
):
    """In this process, where its getOrCreate() finds the test run's Spark session: once as
    written (the embedded default), once with the bucket-only location and storage."""
    monkeypatch.chdir(tmp_path)
    page, section = "docs/how-to/spark.md", "Append a day"
    code = snippet(page, section)
    printed = [
        "rows at time 2 are already in array 't2m' (time 0..2); an append writes past the "
        "end, or give mode('overwrite') to replace them",
        "(3, 4) [ 0 24 48]",
        "['day 2, corrected', 'day 2', 'day 1', 'day 0']",
    ]
    exec(compile(code, page, "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == printed
    store = zl.Repo.open(tmp_path / "daily-t2m").readonly_session().store
    t2m = zarr.open_array(store, path="t2m")
    assert t2m[:].tolist() == [[10 + d + s + 0.5 * (d == 2) for s in range(4)] for d in range(3)]

    on_bucket, location, storage = _on_a_bucket(code, s3_server, "daily-t2m", "datasets/t2m")
    exec(compile(on_bucket, page, "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == printed
    repo = zl.Repo.open(location, storage_options=storage)
    assert repo.spec.metastore.startswith("bucket")
    assert zarr.open_array(repo.readonly_session().store, path="time")[:].tolist() == [0, 24, 48]


def test_the_dask_how_to_runs_as_written_and_leaves_no_session(tmp_path):
    code = snippet("docs/how-to/dask.md", "Dask")
    assert "flush" not in code  # a task needs nothing beyond writing
    res = run_script(code, tmp_path)
    assert res.stdout.strip().splitlines()[-1] == "nightly job"
    repo = zl.Repo.open(tmp_path / "myrepo")
    assert repo.list_sessions() == []
    t = zarr.open_array(repo.readonly_session().store, path="t", mode="r")
    assert t.shape == (720, 100)
    assert [t[24 * day, 0] for day in range(30)] == [float(day) for day in range(30)]
    repo.close()


def test_the_multiprocessing_how_to_runs_as_written(tmp_path):
    code = snippet("docs/how-to/multiprocessing.md", "Multiprocessing and orchestrators")
    res = run_script(code, tmp_path)
    assert res.stdout.strip().splitlines()[-1] == "[0. 1. 2. 3. 4. 5. 6. 7.]"
    repo = zl.Repo.open(tmp_path / "mp-repo")
    assert [c.message for c in repo.log()][:1] == ["hourly run"]
    assert repo.list_sessions() == []
    repo.close()


def recovered(page: str, section: str, tmp_path: Path, repo: str, message: str) -> list[str]:
    """Run a recovery example; its lines of output, once its repository's head is a commit
    `message` and no session is left open."""
    res = run_script(snippet(page, section), tmp_path)
    opened = zl.Repo.open(tmp_path / repo)
    assert opened.log(limit=1)[0].message == message and opened.list_sessions() == []
    opened.close()
    return res.stdout.strip().splitlines()


@pytest.mark.slow(seconds=6)
def test_the_recovery_of_a_crashed_committer_runs_as_written(tmp_path):
    page, section = "docs/concepts.md", "When a worker or the committer dies"
    lines = recovered(page, section, tmp_path, "recovery-repo", "nightly")
    assert lines == ["include", "[0. 1. 2. 3.]"]


@pytest.mark.slow(seconds=12)
def test_the_multiprocessing_recovery_runs_as_written(tmp_path):
    page = "docs/how-to/multiprocessing.md"
    lines = recovered(page, "When a worker dies", tmp_path, "mp-recovery", "hourly run")
    assert lines[-1] == "[0. 1. 2. 3. 4. 5. 6. 7.]"


@pytest.mark.slow(seconds=25)
def test_the_dask_recovery_runs_as_written(tmp_path):
    page = "docs/how-to/dask.md"
    lines = recovered(page, "When a worker dies", tmp_path, "dask-recovery", "nightly job")
    assert lines[-1] == "[0. 1. 2. 3. 4. 5.]"
    assert (tmp_path / "died-once").exists()  # a worker did die


def test_the_xarray_how_to_runs_as_written(tmp_path):
    res = run_script(snippet("docs/how-to/xarray.md", "xarray"), tmp_path)
    head, earlier = res.stdout.split("<xarray.Dataset>")[1:]
    assert "t2m" in head and "wind" in head  # the head of main
    assert "t2m" in earlier and "wind" not in earlier  # one commit earlier
    repo = zl.Repo.open(tmp_path / "weather-repo")
    assert [c.message for c in repo.log()][:2] == ["Add wind", "Add t2m"]
    repo.close()


def test_the_virtual_example_runs_as_written(tmp_path):
    section = "Virtual chunks: NetCDF/HDF5 archives versioned where they lie"
    res = run_script(snippet("docs/how-to/virtual.md", section), tmp_path)
    assert res.stdout.split("\n")[:2] == ["[270. 271. 272.] True", "3 3 3"]


def test_the_deployment_examples_run_with_their_placeholders_filled_in(
    tmp_path, s3_server, pg_metastore_url
):
    page = "docs/how-to/deployment.md"
    run_script(snippet(page, "One machine"), tmp_path)
    assert (tmp_path / "weather-repo" / "zarrlake.json").exists()

    bucket, pg_bucket = (f"docs-{uuid.uuid4().hex[:12]}" for _ in range(2))
    for name in (bucket, pg_bucket):
        s3_client(s3_server).create_bucket(Bucket=name)
    common = {"my-bucket": bucket, "https://s3.eu-central-1.amazonaws.com": s3_server}
    credentials = {
        '"AKIA..."': '"test"',
        '"secret_access_key": "..."': '"secret_access_key": "test"',
        '"allow_http": False': '"allow_http": True',  # the test server speaks plain HTTP
    }
    bucket_only = filled(snippet(page, "Many machines, one bucket"), {**common, **credentials})
    run_script(bucket_only + "\nprint(repo.log()[0].message)\n", tmp_path)
    options = bucket_only[bucket_only.index("storage_options=") + len("storage_options=") :]
    options = options[: options.index("\n    },") + len("\n    }")]
    with_pg = filled(
        snippet(page, "Many machines with PostgreSQL"),
        {
            "my-bucket": pg_bucket,
            "postgresql://zarrlake:secret@db.internal:5432/zarrlake": pg_metastore_url,
            "{...}": options,
        },
    )
    res = run_script(
        "import zarrlake as zl\n" + with_pg + "\nprint(repo.spec.metastore)\n", tmp_path
    )
    assert res.stdout.strip() == pg_metastore_url
    shell = filled(
        snippet(page, "Many machines with PostgreSQL", kind="sh"),
        {**common, "=AKIA...": "=test", "=...": "=test"},
    )
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "ZARRLAKE_ALLOW_HTTP": "1"}
    res = subprocess.run(
        ["bash", "-ec", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "Repository initialized" in res.stdout


def test_the_pull_request_flow_runs_then_a_reviewer_merges_from_the_command_line(tmp_path):
    page = "docs/how-to/pull-requests.md"
    res = run_script(snippet(page, "The daily flow"), tmp_path)
    assert res.stdout.split("\n")[:7] == [
        "[('t2m-range', False)]",
        "2 reasons",
        "[('t2m-range', True)]",
        "merged True",
        "[12.5 13.  12.  11. ]",
        "refused: True",
        "2",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRLAKE_")}
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    shell = snippet(page, "From the command line", kind="sh")
    res = subprocess.run(
        ["bash", "-ec", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "refused" in res.stdout and "1 approval(s) required, 0 given" in res.stderr
    repo = zl.Repo.open(tmp_path / "pr-repo")
    assert [p.id for p in repo.list_pull_requests("merged")] == [1, 2]
    assert repo.log(limit=1)[0].message.startswith("Merge pull request #2 from ingest/day-002")
    repo.close()


def test_the_checks_how_to_runs_as_written(tmp_path):
    res = run_script(snippet("docs/how-to/checks.md", "Checks"), tmp_path)
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "['cf-attrs', 't2m-range', 't2m-schema', 'time-steps']"
    assert "t2m-range False" in res.stdout and "at chunk (4, 0)" in res.stdout
    assert lines[-2:] == ["t2m-range [(4, 0)]", "day 5, fixed"]
    repo = zl.Repo.open(tmp_path / "checks-demo")
    assert [r.passed for r in repo.run_checks("main")] == [True] * 4
    repo.close()


def test_the_daily_spark_job_runs_on_a_directory_and_on_a_bucket(
    spark, s3_server, tmp_path, monkeypatch, capsys
):
    """In this process, where its getOrCreate() finds the test run's Spark session: once as
    written (the embedded default), once with the bucket-only location and storage."""
    monkeypatch.chdir(tmp_path)
    page, section = (
        "docs/how-to/pull-requests.md",
        "A daily Spark job, on one machine or on a bucket",
    )
    code = snippet(page, section)
    exec(compile(code, page, "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.split("\n")[:2] == ["[('t2m-range', True)]", "True"]
    assert zl.Repo.open(tmp_path / "daily-repo").log(limit=1)[0].message.startswith("Merge")

    on_bucket, location, storage = _on_a_bucket(code, s3_server, "daily-repo", "datasets/daily")
    exec(compile(on_bucket, page, "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.split("\n")[:2] == ["[('t2m-range', True)]", "True"]
    repo = zl.Repo.open(location, storage_options=storage)
    assert repo.spec.metastore.startswith("bucket") and repo.list_pull_requests("merged")


def test_the_export_clone_and_purge_examples_run_as_written(tmp_path):
    page = "docs/how-to/managing-data.md"
    runs = {}
    for section in ("Export", "Clone and pull", "Purge"):
        where = tmp_path / section.replace(" ", "-").lower()
        where.mkdir()
        runs[section] = run_script(snippet(page, section), where).stdout.splitlines()
    (line,) = runs["Export"]
    assert line.startswith("4 chunks, ") and int(line.split()[2]) < 24 * 90 * 4  # compressed
    assert runs["Clone and pull"] == ["2 commits copied", "1 new commit, 4 objects copied"]
    purge_id, rest = runs["Purge"][0].split(" ", 1)
    assert rest == "1 chunk(s) purged" and len(purge_id) == 16
    assert runs["Purge"][1:] == ["[10000. 11000.]", "purged: True"]
