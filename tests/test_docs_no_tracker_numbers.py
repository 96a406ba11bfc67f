"""The documentation speaks to users: it names features, never the tracker's issue or stop
numbers (those belong in CHANGELOG.md and commit messages)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
TRACKER = re.compile(r"\b(?:issue|stop)s?\s+#?\d+", re.IGNORECASE)


def test_the_pages_are_found():
    assert len(PAGES) > 20 and ROOT / "docs" / "reliability.md" in PAGES


def test_no_page_cites_an_issue_or_stop_number():
    found = [
        f"{page.relative_to(ROOT)}:{n}: {m.group(0)}"
        for page in PAGES
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in TRACKER.finditer(line)
    ]
    assert not found, "say what the feature is, not its issue:\n" + "\n".join(found)


def test_the_pattern_catches_the_forms_used_before():
    for text in ("(issue 47)", "Issue #12", "issues 30 and 31", "stop 53"):
        assert TRACKER.search(text), text
    assert not TRACKER.search("an issue with 3 arrays")
