"""The demo's directory: it may replace only a repository it made itself.

The demo writes a marker file into the directory before it creates the repository there; a
directory holding anything else (another zarrlake repository, any other files) is refused.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from zarrlake.errors import InvalidInputError

MARKER = "zarrlake-demo.json"
CONFIG = "zarrlake.json"


def is_demo_directory(path: Path) -> bool:
    """Whether `path` holds a marker the demo wrote (a repository the demo made)."""
    marker = path / MARKER
    try:
        return json.loads(marker.read_text()).get("made_by") == "zarrlake demo"
    except (OSError, ValueError, AttributeError):
        return False


def prepare_directory(path: Path) -> tuple[Path, bool]:
    """An empty directory at `path` (absolute), marked as the demo's, and whether an earlier
    demo repository was removed from it. Refuses (InvalidInputError naming the path) a file,
    a zarrlake repository the demo did not make, or any other non-empty directory."""
    path = Path(path).expanduser().absolute()
    replaced = False
    if path.is_file():
        raise InvalidInputError(f"{path} is a file; choose another --dir")
    if path.is_dir() and any(path.iterdir()):
        if is_demo_directory(path):
            shutil.rmtree(path)
            replaced = True
        elif (path / CONFIG).exists():
            raise InvalidInputError(
                f"{path} holds a zarrlake repository that the demo did not make; not "
                "replacing it (choose another --dir, or remove it yourself)"
            )
        else:
            raise InvalidInputError(
                f"{path} exists and is not empty; not wiping it "
                "(choose another --dir, or remove it yourself)"
            )
    path.mkdir(parents=True, exist_ok=True)
    marker = {"made_by": "zarrlake demo", "created": datetime.now(UTC).isoformat()}
    (path / MARKER).write_text(json.dumps(marker) + "\n")
    return path, replaced
