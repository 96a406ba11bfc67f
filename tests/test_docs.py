"""The documentation site builds with warnings as errors (what `make docs` runs: a broken
link or anchor fails it), its CLI reference lists every command of the CLI itself, and its
API reference every public name the package exports and nothing internal."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import zarrlake
import zarrlake.spark
import zarrlake.virtual
from zarrlake._util.deprecation import deprecated_alias
from zarrlake.cli import app

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def command_names(command, prefix: str = "zarrlake") -> list[str]:
    names = [prefix]
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:  # aliases kept for old scripts are not documented
            names += command_names(sub, f"{prefix} {name}")
    return names


INTERNAL = [
    "zarrlake.repo.OnRead",
    "zarrlake.repo.Repo.context",
    "zarrlake.Repo.context",
    "zarrlake.Repo.snapshot_of",
    "zarrlake.Commit.from_record",
    "build_diff",
    "diff_snapshots",
    "StoreSession",
    "on_date",
    "markers",
    "SUPERUSER_PASSWORD",
    "MOTO_LAUNCHER",
    "zarrlake.Session.lookup",
    "zarrlake.Session.peek",
    "zarrlake.Session.prepare",
    "zarrlake.Session.stage",
    "zarrlake.Session.start_writer",
    "zarrlake.Session.accept_writers",
    "zarrlake.Session.writer",
    "zarrlake.Session.inline_max",
    "zarrlake.Session.read_ranges",
    "zarrlake.Session.staged_changes",
    "test_",
]
"""Ids (or parts of ids) of internal names the API reference must not show."""


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_command_and_public_name(site: Path):
    cli = (site / "cli" / "index.html").read_text()
    for name in command_names(typer.main.get_command(app)):
        assert f"<code>{name}</code>" in cli, name
    api = "".join(p.read_text() for p in (site / "api").glob("*/index.html"))
    for name in zarrlake.__all__:
        module = getattr(zarrlake, name).__module__
        assert f'id="zarrlake.{name}"' in api or f'id="{module}.{name}"' in api, name
    for package in (zarrlake.spark, zarrlake.virtual):
        for name in package.__all__:
            assert f'id="{package.__name__}.{name}"' in api, name
    for report in ("GcReport", "ExpireReport", "CopyReport", "Problem", "ExpiredHistory"):
        assert f'id="zarrlake.{report}"' in api, report
    assert 'id="zarrlake.WriterInfo"' in api
    ids = re.findall(r'id="(zarrlake[^"]*)"', api)
    for internal in INTERNAL:
        assert not [i for i in ids if internal in i], internal
    for page in ("how-to/spark", "how-to/dask", "how-to/xarray", "how-to/deployment"):
        assert (site / page / "index.html").exists(), page
    for page in ("how-to/virtual", "reliability", "performance"):
        assert (site / page / "index.html").exists(), page


ENGINE_HOOKS: dict[str, set[str]] = {}
"""Public members of Repo, Session and PullRequest the API reference leaves out: none. What
the engine, Spark and the CLI use of them is public and documented; what they must not
expose is underscored (`Repo._context`, `Session._read_ranges`), and the old public names
of those are deprecated aliases, left out too."""


@pytest.mark.slow
def test_the_reference_lists_every_user_member_of_repo_and_session(site: Path):
    api = "".join(p.read_text() for p in (site / "api").glob("*/index.html"))
    for cls in (zarrlake.Repo, zarrlake.Session, zarrlake.PullRequest):
        members = {n for n in vars(cls) if not n.startswith("_")}
        old = {n for n in members if deprecated(cls, n)}
        hooks = ENGINE_HOOKS.get(cls.__name__, set())
        assert hooks <= members, cls  # the list is not stale
        for name in sorted(members - hooks - old):
            assert f'id="zarrlake.{cls.__name__}.{name}"' in api, f"{cls.__name__}.{name}"
        for name in hooks | old:
            assert f'id="zarrlake.{cls.__name__}.{name}"' not in api, f"{cls.__name__}.{name}"


def deprecated(cls: type, name: str) -> bool:
    """Whether member `name` of `cls` is an old name kept for one release (not documented)."""
    member = inspect.getattr_static(cls, name)
    doc = getattr(member, "__doc__", None) or ""
    return isinstance(member, deprecated_alias) or doc.startswith("Deprecated")


@pytest.mark.slow
def test_the_site_shows_the_readme_quick_start_and_a_table_of_every_command(site: Path):
    """The README's quick start is included, not copied; the command table is generated."""
    for page in ("index.html", "getting-started/index.html"):
        html = (site / page).read_text()
        assert "quickstart-repo" in html and "--8&lt;--" not in html and "--8<--" not in html
    cli = (site / "cli" / "index.html").read_text()
    table = cli[: cli.index('id="reference"')]
    for name in command_names(typer.main.get_command(app)):
        sub = typer.main.get_command(app)
        for word in name.split()[1:]:
            sub = sub.commands[word]
        if not getattr(sub, "commands", None):  # a leaf: a row linking to its reference
            assert f'href="#{name.replace(" ", "-")}"' in table, name
            assert f'id="{name.replace(" ", "-")}"' in cli, name
