"""Every error message zarrlake writes ends with what the user can do next ("...; run
`zarrlake sessions list` to see them", "...; give shape, chunks, dims and dtype to create it").

A scan of the source: each `raise SomeError("literal or f-string")` of a ZarrLakeError class
must carry an advice clause (an imperative after ';', ':', '(' or '.', or a "must"/"needs"
rule), or end with `errors.REPORT_BUG` when only a bug in zarrlake raises it. Messages passed
in a variable, and wrappers ending with the message of the error they wrap (`{e}`), are left
to where that text is written."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import zarrlake.errors as errors

SRC = Path(errors.__file__).parent

VERBS = "|".join(  # imperatives an advice clause starts with
    [
        "abandon",
        "add",
        "allow",
        "append",
        "approve",
        "ask",
        "avoid",
        "blame",
        "call",
        "cast",
        "change",
        "check",
        "choose",
        "clip",
        "clone",
        "close",
        "commit",
        "configure",
        "copy",
        "create",
        "declare",
        "delete",
        "drop",
        "export",
        "fill",
        "fix",
        "follow",
        "give",
        "go",
        "grant",
        "import",
        "install",
        "leave",
        "list",
        "look",
        "merge",
        "move",
        "name",
        "open",
        "pass",
        "pick",
        "point",
        "protect",
        "pull",
        "put",
        "read",
        "rebase",
        "reimport",
        "remove",
        "rename",
        "reopen",
        "repartition",
        "replace",
        "report",
        "reset",
        "restart",
        "restore",
        "retry",
        "run",
        "see",
        "select",
        "set",
        "settle",
        "shorten",
        "specify",
        "split",
        "squash",
        "start",
        "stop",
        "try",
        "unprotect",
        "update",
        "upgrade",
        "use",
        "wait",
        "write",
    ]
)
ADVICE = re.compile(
    r"(?:^|[;:(]\s*|,\s+(?:or|then)\s+|\.\s+)"  # where a clause starts
    r"(?:(?:or|then|first|instead)\s+)?(?:to \w+(?: \w+)?,? )?"  # "or ...", "to create it, ..."
    rf"(?:{VERBS})(?:\b|_)",  # "remove_check(...) first" names the call to make
    re.I,
)
RULES = re.compile(r"\b(must|needs?|expected)\b|give options", re.I)

# Errors that never reach a user (caught inside zarrlake).
INTERNAL = {"UndecidedError"}
# Sites whose advice is written elsewhere, each with why.
ALLOWED = {
    # the reason ({detail}) is chosen from a table whose entries end with what to do
    ("vc/pulls.py", "cannot {} pull request #{}: {}"),
    # the storage layer's not-found: callers turn it into their own message; pinned by tests
    ("storage/local.py", "object {} not found in {}"),
    # a missing branch says only that (tests pin it whole, as users may)
    ("lifecycle/expire.py", "branch {} does not exist"),
}
CAUSES = {"e", "exc", "error", "err", "cause", "problem", "text"}
MESSAGE_SECOND = {"ConflictError", "BranchMovedError", "FastForwardError"}


def _text(node: ast.expr) -> str | None:
    """The literal text of a message (f-string fields as '{}'), None if not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v.value, ast.Name) and v.value.id == "REPORT_BUG":
                parts.append(errors.REPORT_BUG)
            else:
                parts.append("{}")
        return "".join(parts)
    return None


def _wraps_cause(node: ast.expr) -> bool:
    """An f-string ending with the message of the error it wraps: its end is the cause's."""
    if not isinstance(node, ast.JoinedStr) or not isinstance(node.values[-1], ast.FormattedValue):
        return False
    return any(isinstance(n, ast.Name) and n.id in CAUSES for n in ast.walk(node.values[-1]))


def _error_classes(trees: dict[str, ast.Module]) -> set[str]:
    names = {
        n
        for n, c in vars(errors).items()
        if inspect.isclass(c) and issubclass(c, errors.ZarrLakeError)
    }
    grown = True
    while grown:
        grown = False
        for tree in trees.values():
            for n in ast.walk(tree):
                if (
                    isinstance(n, ast.ClassDef)
                    and n.name not in names
                    and any(isinstance(b, ast.Name) and b.id in names for b in n.bases)
                ):
                    names.add(n.name)
                    grown = True
    return names


def messages(trees: dict[str, ast.Module]) -> list[tuple[str, int, str, str]]:
    """(file, line, class, message) of each raise with a literal message to check."""
    classes = _error_classes(trees) - INTERNAL
    found = []
    for rel, tree in trees.items():
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)):
                continue
            f = n.exc.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if name not in classes:
                continue
            at = 1 if name in MESSAGE_SECOND else 0
            node = n.exc.args[at] if len(n.exc.args) > at else None
            for k in n.exc.keywords:
                node = k.value if k.arg == "message" else node
            text = None if node is None else _text(node)
            if text is not None and not _wraps_cause(node):
                found.append((rel, n.lineno, name, text))
    return found


def without_advice(trees: dict[str, ast.Module]) -> list[str]:
    return [
        f"{rel}:{line}: {name}({text!r})"
        for rel, line, name, text in messages(trees)
        if not (ADVICE.search(text) or RULES.search(text) or errors.REPORT_BUG in text)
        and (rel, text) not in ALLOWED
    ]


def _source_trees() -> dict[str, ast.Module]:
    return {
        p.relative_to(SRC).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(SRC.rglob("*.py"))
        if "testing" not in p.relative_to(SRC).parts
    }


def test_every_error_message_says_what_to_do() -> None:
    trees = _source_trees()
    assert len(messages(trees)) > 300  # the scan sees the raise sites
    missing = without_advice(trees)
    assert not missing, "end these messages with what to do:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('raise NotFoundError(f"no array {path!r} at {ref!r}")', True),
        ('raise errors.InvalidInputError("bad slice")', True),
        ('raise ConflictError([], f"cannot merge {a} into {b}: no common history")', True),
        ('raise NotFoundError(f"no array {p!r}; run `zarrlake ls REF` to see the arrays")', False),
        ('raise InvalidInputError(f"step must be positive, not {step}")', False),
        ('raise CorruptionError(f"unexpected key {k!r}; {REPORT_BUG}")', False),
        ('raise InvalidInputError(f"bad URL {url!r}: {e}")', False),
        ('raise ValueError("a library error of its own")', False),
    ],
)
def test_the_scan_flags_a_message_without_advice(source: str, flagged: bool) -> None:
    assert bool(without_advice({"x.py": ast.parse(source)})) is flagged
