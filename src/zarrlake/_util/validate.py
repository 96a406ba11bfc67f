"""Validation of user-given names: branches, tags, node paths and store keys."""

from __future__ import annotations

import re

from zarrlake.errors import InvalidInputError

MAX_NAME_BYTES = 255
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
RESERVED_REF_NAMES = frozenset({"HEAD"})
"""Names that mean something in ref expressions and so cannot be branches or tags."""


def check_ref_name(name: object, what: str = "branch") -> str:
    """Git's rules for ref names (git check-ref-format), plus a length limit."""
    if not isinstance(name, str):
        raise InvalidInputError(f"{what} name must be a string, not {type(name).__name__}")
    problem = None
    if not name:
        problem = "is empty"
    elif len(name.encode()) > MAX_NAME_BYTES:
        problem = f"is longer than {MAX_NAME_BYTES} bytes"
    elif _BAD_REF_CHARS.search(name):
        problem = "contains a space, control character or one of ~ ^ : ? * [ \\"
    elif name in RESERVED_REF_NAMES:
        problem = "is a reserved word"
    elif name == "@":
        problem = "is '@' alone, which git reserves as another name for HEAD"
    elif ".." in name or "@{" in name:
        problem = "contains '..' or '@{'"
    elif name.startswith("/") or name.endswith("/") or "//" in name:
        problem = "starts or ends with '/' or contains '//'"
    elif name.endswith(".") or name.endswith(".lock"):
        problem = "ends with '.' or '.lock'"
    elif any(part.startswith(".") for part in name.split("/")):
        problem = "has a component starting with '.'"
    if problem:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidInputError(f"invalid {what} name {shown!r}: it {problem}; choose another name")
    return name


def check_new_ref_name(name: object, what: str = "branch") -> str:
    """A name for a new branch or tag (`Repo.create_branch`/`create_tag`): `check_ref_name`'s
    rules, and no leading '-' (the command line would read it as an option). Refs made
    before this rule keep working, and clones copy them."""
    name = check_ref_name(name, what)
    if name.startswith("-"):
        raise InvalidInputError(
            f"invalid {what} name {name!r}: it starts with '-', which the command line would "
            "read as an option; drop the leading '-'"
        )
    return name


def check_zarr_key(key: object) -> str:
    """A zarr store key: relative, '/'-separated, no empty, '.' or '..' segments."""
    if not isinstance(key, str):
        raise InvalidInputError(f"store key must be a string, not {type(key).__name__}")
    problem = None
    if not key:
        problem = "is empty"
    elif key.startswith("/") or key.endswith("/"):
        problem = "starts or ends with '/'"
    elif any(seg in ("", ".", "..") for seg in key.split("/")):
        problem = "has an empty, '.' or '..' segment"
    elif _CONTROL_CHARS.search(key):  # a regex: this runs once per chunk written
        problem = "contains a control character"
    elif len(key.encode()) > 4096:
        problem = "is longer than 4096 bytes"
    if problem:
        shown = key if len(key) <= 60 else key[:57] + "..."
        raise InvalidInputError(f"invalid store key {shown!r}: it {problem}; choose another key")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: '' or a key-like string (a trailing '/' is allowed)."""
    if prefix:
        check_zarr_key(prefix.rstrip("/") or "x")
    return prefix
