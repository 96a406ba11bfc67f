"""The README's Python quick start runs as written, in a fresh directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def first_python_block(text: str) -> str:
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match, "README.md has no ```python block"
    return match.group(1)


def test_quick_start_runs_as_written(tmp_path):
    code = first_python_block(README.read_text())
    assert len(code.strip().splitlines()) <= 20  # a quick start, not a tutorial
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
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
    text = README.read_text()
    section = text[text.index("### Merging branches") :]
    code = first_python_block(section)
    script = tmp_path / "merge.py"
    script.write_text(code)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:3] == ["2", "[1. 1. 2. 2.]", "Top rows on dev"]


def test_virtual_example_runs_as_written(tmp_path):
    text = README.read_text()
    code = first_python_block(text[text.index("## Virtual chunks") :])
    script = tmp_path / "virtual.py"
    script.write_text(code)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["[270. 271. 272.] True", "3 3 3"]
