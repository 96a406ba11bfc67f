"""Issue 14 (the first hour of a new user), CLI items: secrets never printed, lazy start-up,
--version, flags shown as flags, --json everywhere, session id prefixes, ls of an empty
repository, cat of one value, fsck's report, and connection errors that say what to do.
What a real process shows (secrets in anything it prints, start-up, --version, the working
directory, exit) goes through the installed console script in a subprocess; the rest runs
the console script's entry point in this process."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl
import zarrlake.cli
from tests.helpers import cli_process as process
from tests.helpers.cli import fails, ok

CLI_DIR = Path(zarrlake.cli.__file__).parent


# item 3: passwords and secret options are never printed ------------------------------------


def test_init_with_postgres_masks_the_password(tmp_path, pg_metastore_url):
    assert ":" in pg_metastore_url.split("://", 1)[1].split("@", 1)[0], "URL has a password"
    password = pg_metastore_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    res = process.ok("init", "-r", str(tmp_path / "r"), "--metastore", pg_metastore_url)
    assert password not in res.stdout + res.stderr
    assert ":***@" in res.stdout
    res = process.ok("init", "--json", "-r", str(tmp_path / "r2"), "--metastore", pg_metastore_url)
    assert password not in res.stdout + res.stderr
    assert ":***@" in json.loads(res.stdout)["metastore"]


def test_errors_mask_url_passwords_and_secret_options(tmp_path):
    line = process.fails(
        "init",
        "-r",
        str(tmp_path / "r"),
        "--metastore",
        "postgresql://alice:hunter2pw@127.0.0.1:1/db",
    )
    assert "hunter2pw" not in line and "connection refused" in line
    res = process.run(
        "log",
        "-r",
        "s3://bucket/repo",
        "--metastore",
        f"sqlite:///{tmp_path}/m.db?password=topsecret1",
        "--secret-access-key",
        "sekr3tvalue",
        "--storage-option",
        "session_token=tok3nvalue",
    )
    assert res.returncode != 0
    for secret in ("topsecret1", "sekr3tvalue", "tok3nvalue"):
        assert secret not in res.stdout + res.stderr


def test_redactor_masks_urls_queries_and_values():
    from zarrlake.cli.redact import Redactor

    r = Redactor()
    r.add(["s3cr3t-key"])
    text = r("postgresql://u:pw@h/db?password=x&sslmode=require key=s3cr3t-key")
    assert text == "postgresql://u:***@h/db?password=***&sslmode=require key=***"
    assert r("postgresql://u@h/db") == "postgresql://u@h/db"


# item 6: start-up imports few modules --------------------------------------------------------

_NEVER = {"pyarrow", "pyspark", "psycopg", "psycopg_pool", "starlette", "uvicorn", "xarray"}
_NEVER |= {"dask", "distributed", "pandas"}


def _modules(*args: str) -> set[str]:
    res = subprocess.run(
        [sys.executable, "-c", process.PROBE, *args], capture_output=True, text=True, timeout=120
    )
    return set(ast.literal_eval(res.stderr.strip().splitlines()[-1]))


def test_help_and_log_import_no_engine_extras(tmp_path):
    zl.Repo.create(tmp_path / "r").close()
    for args, never, ran in (
        (["--help"], _NEVER | {"zarr", "numpy"}, "zarrlake.cli.lifecycle"),
        (["-r", str(tmp_path / "r"), "log"], _NEVER | {"zarr"}, "zarrlake.cli.history"),
        (["branch", "--help"], _NEVER | {"zarr", "numpy"}, "zarrlake.cli.branches"),
    ):
        loaded = _modules(*args)
        assert not {m for m in loaded if m.split(".")[0] in never}, args
        assert ran in loaded  # the probe did run the CLI (a command imports its own module)


def test_cli_modules_import_only_typer_rich_and_light_zarrlake_modules():
    """The engine (zarr, numpy, the repository) loads inside the commands that need it."""
    light = {"zarrlake.errors", "zarrlake.present", "zarrlake.vc.policies"} | {
        f"zarrlake.cli.{p.stem}" for p in CLI_DIR.glob("*.py")
    }
    light |= {"zarrlake.cli", "zarrlake._util.secrets"}
    # zarrlake._util.secrets (what is masked in output) imports re alone.
    secrets = ast.parse((CLI_DIR.parent / "_util" / "secrets.py").read_text())
    assert {n.module for n in secrets.body if isinstance(n, ast.ImportFrom)} == {"__future__"}
    assert [a.name for n in secrets.body if isinstance(n, ast.Import) for a in n.names] == ["re"]
    # zarrlake.vc.policies (the option values, as Literal types) imports typing alone.
    policies = ast.parse((CLI_DIR.parent / "vc" / "policies.py").read_text())
    imported = {n.module for n in policies.body if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "typing"}
    assert not [n for n in policies.body if isinstance(n, ast.Import)]
    assert (CLI_DIR.parent / "vc" / "__init__.py").read_text().count("import") == 0
    for path in sorted(CLI_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only; TYPE_CHECKING blocks are If nodes
            if isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                if top == "zarrlake":
                    assert node.module in light, f"{path.name} imports {node.module}"
                else:
                    assert top in _STDLIB_OR_UI, f"{path.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in _STDLIB_OR_UI, f"{path.name}: {alias.name}"


_STDLIB_OR_UI = set(sys.stdlib_module_names) | {"__future__", "typer", "rich"}


# item 8: version, flags, --json, prefixes, ls, cat, fsck ------------------------------------


def test_version():
    res = process.ok("--version")
    assert res.stdout.strip() == f"zarrlake {zl.__version__}"


def test_boolean_flags_are_shown_as_flags():
    for args in (["--help"], ["log", "--help"], ["gc", "--help"], ["branch", "delete", "--help"]):
        text = ok(*args).stdout
        assert "<bool>" not in text and "BOOLEAN" not in text, args
    assert "--debug" in ok("--help").stdout


def _repo_with_session(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "r"
    repo = zl.Repo.create(path)
    s = repo.create_session(message="work")
    arr = zarr.open_group(s.store).create_array("a", shape=(3, 4), chunks=(3, 4), dtype="i4")
    arr[:] = np.arange(12, dtype="i4").reshape(3, 4)
    s.commit("a")
    session_id = repo.create_session(message="pending").id
    repo.create_branch("dev")
    repo.create_tag("v1")
    repo.close()
    return path, session_id


def test_json_on_delete_abandon_and_extend_with_id_prefixes(tmp_path):
    path, sid = _repo_with_session(tmp_path)
    r = ["-r", str(path)]
    out = json.loads(ok("sessions", "extend", sid[:6], "2d", "--json", *r).stdout)
    assert out["id"] == sid and out["expires_at"].endswith("+00:00")
    assert f"Session {sid} now expires" in ok("sessions", "extend", sid[:8], "1d", *r).stdout
    assert json.loads(ok("sessions", "show", sid[:6], "--json", *r).stdout)["id"] == sid
    out = json.loads(ok("sessions", "abandon", sid[:6], "--json", *r).stdout)
    assert out == {"id": sid, "status": "abandoned"}
    assert zl.Repo.open(path).session_info(sid).state == "abandoned"
    head = zl.Repo.open(path).resolve("main")
    assert json.loads(ok("branch", "delete", "dev", "--json", *r).stdout) == {
        "deleted_branch": "dev",
        "commit": head,
        "open_sessions": [],
    }
    assert json.loads(ok("tag", "delete", "v1", "--json", *r).stdout) == {
        "deleted_tag": "v1",
        "commit": head,
    }
    assert zl.Repo.open(path).list_branches().keys() == {"main"}


def test_deleting_a_branch_names_its_open_sessions_at_once(tmp_path):
    """Issue 14 item 5: the sessions left without a branch are named when it is deleted."""
    path, _ = _repo_with_session(tmp_path)
    repo = zl.Repo.open(path)
    orphan = repo.create_session("dev", message="still writing").id
    repo.close()
    res = ok("branch", "delete", "dev", "-r", str(path))
    assert "1 open session(s) of it can no longer commit" in res.stdout
    assert orphan in res.stdout.replace("\n", "")


def test_ls_of_a_fresh_repository_is_an_empty_tree(tmp_path):
    ok("init", "-r", str(tmp_path / "r"))
    res = ok("ls", "-r", str(tmp_path / "r"))
    assert res.stdout.startswith("/ at main") and "empty" in res.stdout
    assert json.loads(ok("ls", "--json", "-r", str(tmp_path / "r")).stdout) == []
    assert "no group or array 'x'" in fails("ls", "main", "x", "-r", str(tmp_path / "r"))


def test_cat_of_one_value_prints_the_value(tmp_path):
    path, _ = _repo_with_session(tmp_path)
    res = ok("cat", "main", "a", "--slice", "1,2", "-r", str(path))
    assert res.stdout.strip().splitlines()[-1] == "6"
    out = json.loads(ok("cat", "main", "a", "--slice", "1,2", "--json", "-r", str(path)).stdout)
    assert out["values"] == 6 and out["shape"] == []


def test_fsck_says_what_it_checked(tmp_path):
    path, _ = _repo_with_session(tmp_path)
    res = ok("fsck", "-r", str(path))
    assert res.stdout.startswith("ok: checked 2 commits, ")
    assert " objects, " in res.stdout and "reachable from all branches and tags" in res.stdout
    out = json.loads(ok("fsck", "--json", "-r", str(path)).stdout)
    assert out["ok"] and out["checked"]["commits"] == 2
    assert out["checked"]["objects"] > 2 and out["checked"]["bytes"] > 0


# item 9: connection errors that say what to do ----------------------------------------------


def test_plain_http_endpoint_without_allow_http_says_to_add_it(tmp_path):
    line = fails(
        "log",
        "-r",
        "s3://bucket/repo",
        "--metastore",
        f"sqlite:///{tmp_path}/m.db",
        "--endpoint-url",
        "http://127.0.0.1:9",
    )
    assert "S3 endpoint http://127.0.0.1:9 is plain HTTP; add --allow-http" in line


def test_plain_http_endpoint_with_allow_http_works(tmp_path, s3_location):
    location, opts = s3_location
    args = ["-r", location, "--metastore", f"sqlite:///{tmp_path}/m.db"]
    args += ["--endpoint-url", opts["endpoint_url"], "--region", opts["region"]]
    args += ["--access-key-id", "test", "--secret-access-key", "test", "--allow-http"]
    assert "main -> " in ok("init", *args).stdout
    assert "repository initialized" in ok("log", *args).stdout.lower()


def test_sqlite_url_with_three_slashes_and_an_absolute_path(tmp_path):
    """sqlite:///<tmp>/m.db from another directory: the file under <tmp>, and init says so."""
    db = tmp_path / "m.db"
    rel = str(db).lstrip("/")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    res = process.ok("init", "-r", str(tmp_path / "r"), "--metastore", f"sqlite:///{rel}", cwd=cwd)
    assert f"(file {db})" in res.stdout
    assert db.is_file() and not (cwd / rel).exists()
    assert (
        "repository initialized"
        in process.ok(
            "log", "-r", str(tmp_path / "r"), "--metastore", f"sqlite:///{rel}"
        ).stdout.lower()
    )


def test_sqlite_relative_url_stays_relative(tmp_path):
    res = process.ok(
        "init", "-r", str(tmp_path / "r"), "--metastore", "sqlite:///m.db", cwd=tmp_path
    )
    assert f"(file {tmp_path / 'm.db'})" in res.stdout and (tmp_path / "m.db").is_file()


def test_postgres_pool_closes_cleanly_at_exit(tmp_path, pg_metastore_url):
    """No 'Exception ignored ... ConnectionPool.__del__' when a process exits with the
    repository still open."""
    zl.Repo.create(tmp_path / "r", metastore=pg_metastore_url).close()
    script = (
        "import sys, zarrlake as zl\n"
        "repo = zl.Repo.open(sys.argv[1], metastore=sys.argv[2])\n"
        "s = repo.create_session()\n"
        "print(len(repo.log()), len(repo.list_sessions()))\n"
    )
    for _ in range(3):
        res = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "r"), pg_metastore_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[0] == "1"
        assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr
    res = process.ok("log", "-r", str(tmp_path / "r"), "--metastore", pg_metastore_url)
    assert res.stderr == ""


def test_a_secret_is_masked_in_its_own_run_only(tmp_path, monkeypatch):
    """`main` run twice in one process (an application, a notebook): the first run's secret
    is not masked in the second run's messages (an earlier `--secret-access-key test` masked
    the word "test" in every later error of the process)."""
    missing = tmp_path / "s3cr3tword"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3tword")
    assert "s3cr3tword" not in fails("-r", missing, "log")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert f"no zarrlake repository at {missing}" in fails("-r", missing, "log")


# retries: one line at most before the error, naming what failed ------------------------------


def test_an_unreachable_endpoint_warns_once_before_its_error(tmp_path):
    res = process.run(
        "log",
        "-r",
        "s3://bucket/repo",
        "--metastore",
        f"sqlite:///{tmp_path}/m.db",
        "--endpoint-url",
        "http://127.0.0.1:1",
        "--allow-http",
        "--access-key-id",
        "test",
        "--secret-access-key",
        "test",
        "--storage-option",
        "connect_timeout=1",
        "--storage-option",
        "max_retries=0",
    )
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert "stamina" not in res.stderr
    *warnings, error = lines
    assert error.startswith("zarrlake: error: ") and "127.0.0.1:1" in error
    assert len(warnings) <= 1, res.stderr  # the last retry only, not one per retry
    for line in warnings:
        assert line.startswith("zarrlake: WARNING: zarrlake.retry: ") and "127.0.0.1:1" in line
