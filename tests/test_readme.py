"""Every Python snippet of the README runs as written, each in a fresh directory (the
deployment examples with their placeholders filled in with this run's S3 and PostgreSQL
servers)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import zarr

import zarrlake as zl
from tests.fixtures.s3 import s3_client

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = [
    "Quick start",
    "Merging branches",
    "Garbage collection and expiry",
    "Spark",
    "Dask",
    "Virtual chunks: NetCDF/HDF5 archives versioned where they lie",
    "Deployment",
    "Deployment",
    "Deployment",
]
"""The section of each ```python block, in order: a new block needs a test here."""


def snippets(kind: str = "python") -> list[tuple[str, str]]:
    """(section heading, code) of every ```kind block, in order."""
    out, section = [], ""
    pattern = re.compile(r"^(#+) ([^\n]*)$|^```(\w*)\n(.*?)^```", re.M | re.S)
    for match in pattern.finditer(README.read_text()):
        if match.group(1):
            section = match.group(2).strip()
        elif match.group(3) == kind:
            out.append((section, match.group(4)))
    return out


def snippet(section: str, n: int = 0, kind: str = "python") -> str:
    return [code for s, code in snippets(kind) if s == section][n]


def run_script(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    script = cwd / f"snippet_{uuid.uuid4().hex[:8]}.py"
    script.write_text(code)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, res.stderr
    return res


def filled(code: str, values: dict[str, str]) -> str:
    """`code` with each placeholder replaced; every placeholder must be there."""
    for placeholder, value in values.items():
        assert placeholder in code, placeholder
        code = code.replace(placeholder, value)
    return code


def test_every_python_snippet_has_a_test():
    assert [section for section, _ in snippets()] == SNIPPETS


def test_quick_start_runs_as_written(tmp_path):
    code = snippet("Quick start")
    assert len(code.strip().splitlines()) <= 20  # a quick start, not a tutorial
    res = run_script(code, tmp_path)
    # What the block prints: the tagged row (time travel) and the two chunks the fix wrote.
    assert "[0. 1. 2.]" in res.stdout
    assert "'temperature': {" in res.stdout and "(0, 0)" in res.stdout and "(0, 1)" in res.stdout
    assert (tmp_path / "quickstart-repo" / "zarrlake.json").exists()


def test_readme_names_the_setup_commands_and_requirements():
    text = README.read_text()
    top = text[: text.index("## Concepts")]
    for needed in ("make demo", "make test", "Python >= 3.12", "Java 17"):
        assert needed in top, needed


def test_merge_example_runs_as_written(tmp_path):
    res = run_script(snippet("Merging branches"), tmp_path)
    assert res.stdout.split("\n")[:3] == ["2", "[1. 1. 2. 2.]", "Top rows on dev"]


def test_expiry_example_runs_after_the_quick_start(tmp_path):
    run_script(snippet("Quick start"), tmp_path)
    res = run_script(snippet("Garbage collection and expiry"), tmp_path)
    assert [int(n) >= 0 for n in res.stdout.split()] == [True] * 3


def test_spark_example_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    """In this process, where its getOrCreate() finds the test run's Spark session."""
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet("Spark"), "README.md (Spark)", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.split() == ["ingest", "2000"]
    assert zl.Repo.open(tmp_path / "zl-spark-demo").log(limit=1)[0].message == "ingest"


def test_dask_example_runs_as_written_and_leaves_no_session(tmp_path):
    res = run_script(snippet("Dask"), tmp_path)
    assert res.stdout.strip().splitlines()[-1] == "nightly job"
    repo = zl.Repo.open(tmp_path / "myrepo")
    assert repo.list_sessions() == []
    t = zarr.open_array(repo.readonly_session().store, path="t", mode="r")
    assert t.shape == (720, 100) and t[24 * 29, 0] == 29.0
    repo.close()


def test_deployment_examples_run_with_their_placeholders_filled_in(
    tmp_path, s3_server, pg_metastore_url
):
    run_script(snippet("Deployment", 0), tmp_path)
    assert (tmp_path / "weather-repo" / "zarrlake.json").exists()

    bucket, pg_bucket = (f"readme-{uuid.uuid4().hex[:12]}" for _ in range(2))
    for name in (bucket, pg_bucket):
        s3_client(s3_server).create_bucket(Bucket=name)
    common = {"my-bucket": bucket, "https://s3.eu-central-1.amazonaws.com": s3_server}
    credentials = {
        '"AKIA..."': '"test"',
        '"secret_access_key": "..."': '"secret_access_key": "test"',
        '"allow_http": False': '"allow_http": True',  # the test server speaks plain HTTP
    }
    bucket_only = filled(snippet("Deployment", 1), {**common, **credentials})
    run_script(bucket_only + "\nprint(repo.log()[0].message)\n", tmp_path)
    options = bucket_only[bucket_only.index("storage_options=") + len("storage_options=") :]
    options = options[: options.index("\n    },") + len("\n    }")]
    with_pg = filled(
        snippet("Deployment", 2),
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
    shell = filled(snippet("Deployment", 0, "sh"), {**common, "=AKIA...": "=test", "=...": "=test"})
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ZARRLAKE_ALLOW_HTTP": "1"}
    res = subprocess.run(
        ["bash", "-ec", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "Repository initialized" in res.stdout


def test_no_snippet_writes_outside_its_directory():
    """Snippets use relative paths, so running them here leaves nothing elsewhere."""
    for section, code in snippets():
        assert "/tmp/" not in code and '"/data' not in code, section


def test_virtual_example_runs_as_written(tmp_path):
    res = run_script(
        snippet("Virtual chunks: NetCDF/HDF5 archives versioned where they lie"), tmp_path
    )
    assert res.stdout.split("\n")[:2] == ["[270. 271. 272.] True", "3 3 3"]
