"""The documentation site builds with warnings as errors (what `make docs` runs), its CLI
reference lists every command of the CLI itself, and its API reference every public name
the package exports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import zarrlake
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
        names += command_names(sub, f"{prefix} {name}")
    return names


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_command_and_public_name(site: Path):
    cli = (site / "cli" / "index.html").read_text()
    for name in command_names(typer.main.get_command(app)):
        assert f"<code>{name}</code>" in cli, name
    api = "".join(p.read_text() for p in (site / "api").glob("*/index.html"))
    for name in zarrlake.__all__:
        module = getattr(zarrlake, name).__module__
        assert f'id="{module}.{name}"' in api or f'id="zarrlake.repo.{name}"' in api, name
    for page in ("how-to/spark", "how-to/dask", "how-to/xarray", "how-to/deployment"):
        assert (site / page / "index.html").exists(), page
