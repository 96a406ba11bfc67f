"""The code examples of the README and of the documentation site (every Markdown page under
docs/), found by their fences: one mechanism for both, so a page's example cannot drift
from what the tests run. `tests/test_docs_examples.py` lists every example and runs it."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(#+) ([^\n]*)$|^```(\w*)\n(.*?)^```", re.M | re.S)


def pages() -> list[str]:
    """The README and every page of the site, as paths relative to the repository."""
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *docs]


def code_blocks(page: str, kind: str = "python") -> list[tuple[str, str]]:
    """(section heading, code) of every ```kind block of `page`, in order."""
    out, section = [], ""
    for match in FENCE.finditer((ROOT / page).read_text()):
        if match.group(1):
            section = match.group(2).strip()
        elif match.group(3) == kind:
            out.append((section, match.group(4)))
    return out


def snippet(page: str, section: str, n: int = 0, kind: str = "python") -> str:
    """The `n`th ```kind block under the heading `section` of `page`."""
    return [code for s, code in code_blocks(page, kind) if s == section][n]


def run_script(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` as a script in `cwd` (worker processes can import it), asserting it exits 0."""
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
