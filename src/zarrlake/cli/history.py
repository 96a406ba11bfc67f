"""History: log, show (one commit and its changes) and diff (between any two refs)."""

from __future__ import annotations

from collections.abc import Container
from typing import TYPE_CHECKING, Annotated

import typer

from zarrlake.cli import plain
from zarrlake.cli.context import (
    PANEL_HISTORY,
    PANEL_REFS,
    REF_HELP,
    AsOfOpt,
    RefArg,
    console,
    deprecated,
    escape,
    is_coords,
    options,
    parse_coords,
    print_json,
    renamed_option,
    usage_error,
    usage_line,
    when,
)
from zarrlake.present import diff_rows, short, subject
from zarrlake.vc.policies import ConflictPolicy, FastForward

if TYPE_CHECKING:
    from zarrlake.vc.commit_info import Commit
    from zarrlake.vc.diff import Diff

JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]


def diff_json(d: Diff) -> dict:
    """A diff for `--json` output: `Diff.to_json` plus a per-node summary."""
    out = d.to_json()
    out["summary"] = [
        {"path": p, "change": s, "chunks_written": w, "chunks_deleted": x}
        for p, s, w, x in diff_rows(d)
    ]
    return out


def print_diff(d: Diff) -> None:
    """Print a diff as a table of changed nodes, or "(no changes)"."""
    rows = diff_rows(d)
    if not rows:
        console.print("(no changes)")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    table.add_column("path")
    table.add_column("change")
    table.add_column("chunks written", justify="right")
    table.add_column("chunks deleted", justify="right")
    colour = {"added": "green", "deleted": "red", "metadata changed": "yellow", "data": ""}
    for p, s, w, x in rows:
        hue = colour.get(s, "cyan")  # "moved from OLD"
        table.add_row(escape(p), f"[{hue}]{escape(s)}[/]" if hue else s, str(w), str(x))
    console.print(table)
    for path in sorted(d.metadata_changed):
        for line in d.metadata_lines(path):
            console.print(f"  {path or '/'}: {line}", markup=False)


def graph_order(repo, head: str, limit: int | None) -> tuple[list[Commit], dict[str, str]]:
    """Commits reachable from `head` through every parent, children before parents and
    otherwise newest first (git's --topo-order), at most `limit` of them; and the parents
    `expire` dropped, each with the note that says so."""
    from zarrlake.errors import ExpiredHistoryError

    seen = {head: repo.commit_info(head)}
    cut: dict[str, tuple[str, str]] = {}  # expired parent: (its child, the note)
    children: dict[str, int] = {}
    todo = [head]
    while todo and (limit is None or len(seen) < limit * 4 + 50):
        cid = todo.pop()
        for p in seen[cid].parent_ids:
            if p not in seen:
                try:
                    seen[p] = repo.commit_info(p)
                except ExpiredHistoryError as e:
                    cut[p] = (cid, str(ExpiredHistoryError.before(cid, p, e.expired_at)))
                    continue
                todo.append(p)
            children[p] = children.get(p, 0) + 1
    ready = [(-seen[head].timestamp.timestamp(), head)]
    out: list[Commit] = []
    while ready and (limit is None or len(out) < limit):
        ready.sort()
        _, cid = ready.pop(0)
        out.append(seen[cid])
        for p in seen[cid].parent_ids:
            if p in children:
                children[p] -= 1
                if children[p] == 0 and p in seen:
                    ready.append((-seen[p].timestamp.timestamp(), p))
    shown = {c.id for c in out}
    return out, {p: note for p, (child, note) in cut.items() if child in shown}


def graph_lines(
    commits: list[Commit], gone: Container[str] = ()
) -> list[tuple[str, Commit | None]]:
    """(graph prefix, commit or None for a connector line): a small `git log --graph`.
    Lines to the parents in `gone` (expired) are not drawn."""
    columns: list[str] = []
    lines: list[tuple[str, Commit | None]] = []
    for c in commits:
        if c.id not in columns:
            columns.append(c.id)
        at = columns.index(c.id)
        joined = [j for j, x in enumerate(columns) if x == c.id and j != at]
        for j in reversed(joined):  # other lines waiting for this commit join it first
            del columns[j]
        if joined:
            lines.append((" ".join("|" for _ in columns) + "/", None))
        lines.append((" ".join("*" if j == at else "|" for j in range(len(columns))), c))
        parents = [p for p in c.parent_ids if p not in gone]
        if not parents:
            del columns[at]
            continue
        columns[at] = parents[0]
        for extra, p in enumerate(parents[1:], start=1):
            columns.insert(at + extra, p)
            lines.append((" ".join("|" for _ in range(at + extra)) + "\\", None))
    return lines


def history_end(repo, commits: list, limit: int | None) -> str | None:
    """'history before X was expired on DATE' if a first-parent log stopped there."""
    if not commits or not commits[-1].parent_ids or (limit is not None and len(commits) >= limit):
        return None
    last = commits[-1]
    expired = repo.expired_at(last.parent_ids[0])
    if expired is None:
        return None
    return f"history before {short(last.id)} was expired on {when(expired)}"


def log(
    ctx: typer.Context,
    ref: RefArg = "main",
    limit: Annotated[int | None, typer.Option(min=0, help="Show at most N commits.")] = None,
    graph: Annotated[
        bool, typer.Option("--graph", help="Follow every parent and draw merges.")
    ] = False,
    as_of: AsOfOpt = None,
    path: Annotated[
        str | None,
        typer.Option("--path", help="Only commits that changed this group or array (or below)."),
    ] = None,
    follow: Annotated[
        str | None,
        typer.Option(
            "--follow",
            metavar="PATH",
            help="As --path, following the node back across its moves (renames).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the commits reachable from REF along first parents, newest first (--graph: all
    parents, drawn as a graph; --path/--follow: those that changed one node). Where `expire`
    ended the history, says so.

    Example: zarrlake -r ./myrepo log main --limit 5 --json; zarrlake log --follow t2m
    """
    if path is not None and follow is not None:
        raise usage_error("give --path or --follow, not both")
    if graph and (path is not None or follow is not None):
        raise usage_error("--graph shows every commit: it does not take --path or --follow")
    repo = options(ctx).open()
    head = repo.resolve(ref, as_of=as_of)
    node = follow if follow is not None else path
    if graph:
        commits, ends = graph_order(repo, head, limit)
    else:
        commits = repo.log(head, limit=limit, path=node, follow=follow is not None)
        end = history_end(repo, commits, limit) if node is None else None
        ends = {commits[-1].parent_ids[0]: end} if end else {}
    if json_out:
        print_json([c.to_json() for c in commits])
        return
    if graph:
        for prefix, c in graph_lines(commits, ends):
            if c is None:
                console.print(prefix, highlight=False, markup=False)
            else:
                merge = " [magenta](merge)[/]" if len(c.parent_ids) > 1 else ""
                line = escape(subject(c.message))
                console.print(
                    f"{escape(prefix)} [yellow]{short(c.id)}[/]{merge} {line}",
                    highlight=False,
                )
    else:
        named = follow is not None
        header = ["commit", "time", "author", *(["path"] if named else []), "message"]
        rows = [
            [
                short(c.id) + (" (merge)" if len(c.parent_ids) > 1 else ""),
                when(c.timestamp),
                c.author or "-",
                *([c.path or "/"] if named else []),
                subject(c.message),
            ]
            for c in commits
        ]
        if not plain.print_table(header, rows):
            from rich.table import Table

            table = Table(box=None, header_style="bold")
            for col in header:
                table.add_column(col)
            for c, row in zip(commits, rows, strict=True):
                merge = " [magenta](merge)[/]" if len(c.parent_ids) > 1 else ""
                table.add_row(f"[yellow]{short(c.id)}[/]{merge}", *map(escape, row[1:]))
            console.print(table)
    for note in ends.values():
        if not plain.print_line(note):
            console.print(f"[dim]{escape(note)}[/]")


def show(
    ctx: typer.Context,
    ref: RefArg = "main",
    as_of: AsOfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one commit (REF's, default main) and the changes it made to its (first) parent.

    Example: zarrlake -r ./myrepo show v1.0
    """
    repo = options(ctx).open()
    commit = repo.commit_info(repo.resolve(ref, as_of=as_of))
    changes = repo.commit_changes(commit.id)
    if json_out:
        print_json({"commit": commit.to_json(), "changes": diff_json(changes)})
        return
    shown = []
    for p in commit.parent_ids:
        expired = repo.expired_at(p)
        shown.append(p + (f" (expired on {when(expired)})" if expired else ""))
    console.print(f"[yellow]commit {commit.id}[/]")
    if len(shown) > 1:
        console.print(f"merge:   {shown[0]}", highlight=False)
        for other in shown[1:]:
            console.print(f"         {other}", highlight=False)
    else:
        console.print(f"parent:  {shown[0] if shown else '(none: initial commit)'}")
    console.print(f"author:  {escape(commit.author or '-')}")
    console.print(f"date:    {when(commit.timestamp)}")
    console.print(f"session: {commit.session_id or '-'}")
    for key, value in sorted(commit.metadata.items()):
        console.print(f"{escape(key)}: {escape(value)}", highlight=False)
    console.print(f"\n    {escape(commit.message)}\n")
    if len(shown) > 1:
        console.print("changes against the first parent:")
    print_diff(changes)


def diff(
    ctx: typer.Context,
    from_ref: Annotated[str, typer.Argument(metavar="A", help="The older ref.")],
    to_ref: Annotated[str, typer.Argument(metavar="B", help="The newer ref.")],
    as_of: AsOfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show what changed from A to B: nodes added, deleted, metadata changed (and how:
    shape, chunks, dtype, codecs, attributes), and chunks written/deleted per array.

    Example: zarrlake -r ./myrepo diff v1.0 main --json
    """
    repo = options(ctx).open()
    d = repo.diff(repo.resolve(from_ref, as_of=as_of), repo.resolve(to_ref, as_of=as_of))
    if json_out:
        print_json(diff_json(d))
        return
    print_diff(d)


def merge(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Branch, tag or commit to merge in.")],
    target: Annotated[
        str | None, typer.Option(help="The branch that receives the merge (default main).")
    ] = None,
    message: Annotated[str | None, typer.Option("-m", "--message", help="Merge message.")] = None,
    author: Annotated[str | None, typer.Option(help="Author of the merge commit.")] = None,
    on_conflict: Annotated[
        ConflictPolicy,
        typer.Option(help="fail | ours (the target wins) | theirs (source wins), per chunk."),
    ] = "fail",
    ff: Annotated[
        FastForward, typer.Option("--ff", help="allow | never (always a merge commit) | only.")
    ] = "allow",
    into: Annotated[str | None, typer.Option(hidden=True, help="Deprecated: --target.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Merge SOURCE into a branch: three-way, per chunk, against their merge base.

    Example: zarrlake -r ./myrepo merge dev --target main -m "bring dev in"
    """
    into = str(renamed_option(target, into, "--target", "--into") or "main")
    repo = options(ctx).open()
    before = repo.resolve(into)
    cid = repo.merge(
        source,
        target=into,
        message=message,
        author=author,
        on_conflict=on_conflict,
        fast_forward=ff,
    )
    commit = repo.commit_info(cid)
    kind = (
        "up to date" if cid == before else "merge" if len(commit.parent_ids) > 1 else "fast-forward"
    )
    if json_out:
        print_json({"branch": into, "commit": cid, "kind": kind, "previous": before})
        return
    console.print(f"{escape(into)}: {kind} {short(before)} -> [yellow]{short(cid)}[/]")


def revert(
    ctx: typer.Context,
    commit: Annotated[str, typer.Argument(help="The commit to undo.")],
    target: Annotated[
        str | None, typer.Option(help="The branch to commit the revert on (default main).")
    ] = None,
    message: Annotated[str | None, typer.Option("-m", "--message", help="Message.")] = None,
    author: Annotated[str | None, typer.Option(help="Author of the revert commit.")] = None,
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty", help="Commit even if the revert changes nothing.")
    ] = False,
    branch: Annotated[str | None, typer.Option(hidden=True, help="Deprecated: --target.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Make a new commit on a branch undoing COMMIT's changes (later commits stay). A revert
    that would change nothing makes no commit and exits 1, unless --allow-empty.

    Example: zarrlake -r ./myrepo revert main~2 --target main
    """
    branch = str(renamed_option(target, branch, "--target", "--branch") or "main")
    repo = options(ctx).open()
    target = repo.resolve(commit)
    cid = repo.revert(
        target, target=branch, message=message, author=author, allow_empty=allow_empty
    )
    if json_out:
        print_json({"branch": branch, "commit": cid, "reverted": target})
        return
    console.print(f"{escape(branch)}: reverted {short(target)} in [yellow]{short(cid)}[/]")


def reset(
    ctx: typer.Context,
    branch: Annotated[str, typer.Argument(help="The branch to move.")],
    to: Annotated[str, typer.Argument(help="Branch, tag, commit id or ref expression.")],
    expected: Annotated[
        str | None, typer.Option(help="Move only if the branch is at this commit now.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Move BRANCH to any commit (compare-and-swap against --expected).

    Example: zarrlake -r ./myrepo reset main main~1 --expected 3f2a9c1b
    """
    repo = options(ctx).open()
    before = repo.resolve(branch)
    cid = repo.reset_branch(branch, to, expected=expected)
    if json_out:
        print_json({"branch": branch, "commit": cid, "previous": before})
        return
    console.print(f"{escape(branch)}: {short(before)} -> [yellow]{short(cid)}[/]")


def squash(
    ctx: typer.Context,
    branch: Annotated[str, typer.Argument(help="The branch whose history is squashed.")],
    since: Annotated[
        str, typer.Option(help="The commit kept: everything after it becomes one commit.")
    ],
    message: Annotated[str | None, typer.Option("-m", "--message", help="Message.")] = None,
    author: Annotated[str | None, typer.Option(help="Author of the new commit.")] = None,
    allow_merges: Annotated[
        bool, typer.Option("--allow-merges", help="Squash across merge commits.")
    ] = False,
    allow_tags: Annotated[
        bool, typer.Option("--allow-tags", help="Squash commits that tags point at.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Replace BRANCH's first-parent history after --since with one commit of the same tree
    (compare-and-swap: a commit landing meanwhile makes it fail, changing nothing).
    `zarrlake gc` later reclaims what only the squashed commits held.

    Example: zarrlake -r ./myrepo squash ingest --since v1 -m "Days 1-30"
    """
    repo = options(ctx).open()
    before, kept = repo.resolve(branch), repo.resolve(since)
    cid = repo.squash(
        branch,
        since=kept,
        message=message,
        author=author,
        allow_merges=allow_merges,
        allow_tags=allow_tags,
    )
    if json_out:
        print_json({"branch": branch, "commit": cid, "previous": before, "since": kept})
        return
    console.print(
        f"{escape(branch)}: squashed {short(kept)}..{short(before)} into [yellow]{short(cid)}[/]"
    )


BLAME_WORDS = "[REF] {ARRAY} {COORD}..."


def blame_words(words: list[str]) -> tuple[str | None, str, tuple[int, ...]]:
    """(ref or None, array, chunk coordinates) from `blame`'s words: the coordinates are the
    trailing words written as coordinates (9,1,2 or 9 1 2), the array the word before them,
    and the ref the word before that, if there is one."""
    cut = len(words)
    while cut > 0 and is_coords(words[cut - 1]):
        cut -= 1
    if cut == len(words):  # no coordinates at the end
        if len(words) > 2:
            parse_coords(words[-1:])  # names the word that is not coordinates
        raise usage_error("Missing argument 'COORD...': the chunk's coordinates, e.g. 9,1,2.")
    if cut == 0:
        raise usage_error("Missing argument 'ARRAY'.")
    if cut > 2:
        extra = " ".join(words[: cut - 2])
        raise usage_error(f"Got unexpected extra argument(s) ({extra}): write {BLAME_WORDS}")
    return (words[0] if cut == 2 else None), words[cut - 1], parse_coords(words[cut:])


def blame(
    ctx: typer.Context,
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="[REF] ARRAY COORD...",
            help=f"REF (default main): {REF_HELP} ARRAY: the array's path, e.g. weather/t2m. "
            "COORD: the chunk's coordinates, 9,1,2 or 9 1 2.",
            show_default=False,
        ),
    ],
    ref_option: Annotated[
        str | None, typer.Option("--ref", metavar="REF", hidden=True, help="Deprecated: REF.")
    ] = None,
    as_of: AsOfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the commit that last wrote one chunk of an array, at REF (default main).

    Example: zarrlake -r ./myrepo blame main weather/t2m 9,1,2
    """
    ref, array, coords = blame_words(words)
    if ref_option is not None:
        if ref is not None:
            raise usage_error(f"give the ref once: {ref!r} or --ref {ref_option!r}", "--ref")
        ref = ref_option
        where = " ".join([ref, array, ",".join(map(str, coords))])
        deprecated("blame ARRAY COORD... --ref REF", f"zarrlake blame {where}")
    ref = ref or "main"
    repo = options(ctx).open()
    c = repo.blame(array, coords, ref=repo.resolve(ref, as_of=as_of))
    if json_out:
        print_json({"array": array, "chunk": list(coords), "commit": c.to_json()})
        return
    where = ",".join(map(str, coords))
    console.print(
        f"{escape(array)} chunk ({where}): [yellow]{short(c.id)}[/] {when(c.timestamp)} "
        f"{escape(c.author or '-')}  {escape(subject(c.message))}",
        highlight=False,
    )


def merge_base(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(metavar="A", help="A ref.")],
    b: Annotated[str, typer.Argument(metavar="B", help="Another ref.")],
    json_out: JsonOpt = False,
) -> None:
    """Print the best common ancestor of A and B.

    Example: zarrlake -r ./myrepo merge-base main dev
    """
    cid = options(ctx).open().merge_base(a, b)
    if json_out:
        print_json({"merge_base": cid})
        return
    console.print(cid, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the history commands (log, show, diff, merge, revert, reset, blame...) to the command
    line."""
    app.command(rich_help_panel=PANEL_HISTORY)(log)
    app.command(rich_help_panel=PANEL_HISTORY)(show)
    app.command(rich_help_panel=PANEL_HISTORY)(diff)
    app.command(rich_help_panel=PANEL_REFS)(merge)
    app.command("merge-base", rich_help_panel=PANEL_REFS)(merge_base)
    app.command(rich_help_panel=PANEL_REFS)(revert)
    app.command(rich_help_panel=PANEL_REFS)(reset)
    app.command(rich_help_panel=PANEL_REFS)(squash)
    app.command(rich_help_panel=PANEL_HISTORY, cls=usage_line(BLAME_WORDS))(blame)
