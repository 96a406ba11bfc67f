"""Pull requests: open, list, show, comment, review, merge, close."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from zarrlake.cli.context import PANEL_REFS, console, escape, options, print_json, renamed_option
from zarrlake.present import short

pr_app = typer.Typer(
    help="Pull requests: propose a branch for merging, review it, merge it once the target's "
    "rules and checks pass (default: list the open ones).\n\n"
    "Example: zarrlake -r ./myrepo pr create ingest/day1 --target main --title 'Day 1'",
    invoke_without_command=True,
    no_args_is_help=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]
IdArg = Annotated[str, typer.Argument(help="The pull request's number (12 or #12).")]
AuthorOpt = Annotated[str | None, typer.Option("--author", help="Who does it (a name).")]
ByOpt = Annotated[str | None, typer.Option("--by", hidden=True, help="Deprecated: --author.")]


def _author(author: str | None, by: str | None, required: bool = False) -> str | None:
    """Who acts: --author, or its deprecated old name --by; a usage error when required and
    neither is given."""
    who = renamed_option(author, by, "--author", "--by")
    if required and who is None:
        raise typer.BadParameter("give --author: who reviews (a name)")
    return None if who is None else str(who)


State = Literal["open", "merging", "merged", "closed", "all"]
"""What `pr list --state` takes (a choice: anything else is a usage error)."""
StateOpt = Annotated[State, typer.Option(help="Which pull requests: all, or those in a state.")]


def _open(ctx: typer.Context, pr_id: str) -> Any:
    return options(ctx).open().pull_request(pr_id)


def _summary(pr: Any, json_out: bool, verb: str) -> None:
    if json_out:
        print_json(pr.to_json(checks=False))
    else:
        console.print(f"{verb} pull request [bold]#{pr.id}[/] ({escape(pr.state)})")


def _list(ctx: typer.Context, state: State, json_out: bool) -> None:
    prs = options(ctx).open().list_pull_requests(None if state == "all" else state)
    if json_out:
        print_json([p.to_json(checks=False) for p in prs])
        return
    if not prs:
        console.print(f"(no {state} pull requests)" if state != "all" else "(no pull requests)")
        return
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold")
    for col in ("id", "state", "source", "target", "author", "title"):
        table.add_column(col)
    for p in prs:
        table.add_row(
            f"#{p.id}", p.state, escape(p.source), escape(p.target), escape(p.author or "-"),
            escape(p.title),
        )  # fmt: skip
    console.print(table)


@pr_app.callback()
def _pr_default(
    ctx: typer.Context,
    state: StateOpt = "open",
    json_out: JsonOpt = False,
) -> None:
    if ctx.invoked_subcommand is None:
        _list(ctx, state, json_out)


@pr_app.command("list")
def pr_list(
    ctx: typer.Context,
    state: StateOpt = "open",
    json_out: JsonOpt = False,
) -> None:
    """List pull requests (default: the open ones).

    Example: zarrlake -r ./myrepo pr list --state all --json
    """
    _list(ctx, state, json_out)


@pr_app.command("create")
def pr_create(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="The branch to merge.")],
    target: Annotated[
        str | None, typer.Option(help="The branch it merges into (default main).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Default: 'Merge SOURCE into TARGET'.")] = None,
    description: Annotated[str, typer.Option(help="What it brings and why.")] = "",
    author: Annotated[str | None, typer.Option(help="Who opens it (a name).")] = None,
    into: Annotated[str | None, typer.Option(hidden=True, help="Deprecated: --target.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Open a pull request of branch SOURCE into another branch (default main).

    Example: zarrlake -r ./myrepo pr create ingest/day1 --target main --title "Day 1" --author bot
    """
    chosen = str(renamed_option(target, into, "--target", "--into") or "main")
    repo = options(ctx).open()
    pr = repo.create_pull_request(
        source, target=chosen, title=title, description=description, author=author
    )
    _summary(pr, json_out, "Opened")


@pr_app.command("show")
def pr_show(ctx: typer.Context, pr_id: IdArg, json_out: JsonOpt = False) -> None:
    """Show a pull request: its checks on the source's current head, approvals, reviews,
    comments, and what blocks its merge.

    Example: zarrlake -r ./myrepo pr show 3
    """
    doc = _open(ctx, pr_id).to_json()
    if json_out:
        print_json(doc)
        return
    console.print(f"[bold]#{doc['id']} {escape(doc['title'])}[/] ({doc['state']})")
    console.print(
        f"{escape(doc['source'])} -> {escape(doc['target'])}, opened by "
        f"{escape(doc['author'] or '-')} at {doc['created']}"
    )
    if doc["description"]:
        console.print(escape(doc["description"]))
    if doc["merge_commit"]:
        console.print(
            f"merged as {short(doc['merge_commit'])} by {escape(doc['merged_by'] or '-')}"
        )
    if "checks" in doc:
        console.print(f"source head {short(doc['source_head'])}")
        for c in doc["checks"]:
            mark = "[green]passed[/]" if c["passed"] else "[red]FAILED[/]"
            console.print(f"  check {escape(c['name'])}: {mark} {escape(c['message'])}")
        console.print(
            f"approvals: {len(doc['approvals'])} of {doc['required_approvals']} required"
            + (f" ({escape(', '.join(doc['approvals']))})" if doc["approvals"] else "")
        )
    for r in doc["reviews"]:
        text = f": {escape(r['text'])}" if r["text"] else ""
        console.print(
            f"  {r['time'][:19]} {escape(r['by'])} {r['verdict']} {short(r['head'])}{text}"
        )
    for c in doc["comments"]:
        console.print(f"  {c['time'][:19]} {escape(c['by'] or '-')}: {escape(c['text'])}")
    blockers = doc.get("blockers")
    if blockers:
        console.print("[red]cannot merge:[/] " + escape("; ".join(blockers)))
    elif blockers is not None:
        console.print("[green]ready to merge[/]")


@pr_app.command("comment")
def pr_comment(
    ctx: typer.Context,
    pr_id: IdArg,
    text: Annotated[str, typer.Argument(help="The comment.")],
    author: AuthorOpt = None,
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Comment on a pull request.

    Example: zarrlake -r ./myrepo pr comment 3 "row 12 looks off" --author alice
    """
    who = _author(author, by)
    _summary(_open(ctx, pr_id).comment(text, author=who), json_out, "Commented on")


@pr_app.command("approve")
def pr_approve(
    ctx: typer.Context,
    pr_id: IdArg,
    author: AuthorOpt = None,
    text: Annotated[str, typer.Option(help="A note with the approval.")] = "",
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Approve a pull request (its source's current head); lifts your request for changes.
    --author (who reviews) is required.

    Example: zarrlake -r ./myrepo pr approve 3 --author alice
    """
    who = str(_author(author, by, required=True))
    _summary(_open(ctx, pr_id).approve(author=who, text=text), json_out, "Approved")


@pr_app.command("request-changes")
def pr_request_changes(
    ctx: typer.Context,
    pr_id: IdArg,
    author: AuthorOpt = None,
    text: Annotated[str, typer.Option(help="What should change.")] = "",
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Ask for changes: the pull request cannot merge until you approve it. --author (who
    reviews) is required.

    Example: zarrlake -r ./myrepo pr request-changes 3 --author bob --text "wrong units"
    """
    who = str(_author(author, by, required=True))
    _summary(
        _open(ctx, pr_id).request_changes(author=who, text=text), json_out, "Requested changes on"
    )


@pr_app.command("merge")
def pr_merge(
    ctx: typer.Context,
    pr_id: IdArg,
    author: AuthorOpt = None,
    message: Annotated[str | None, typer.Option("-m", "--message", help="Merge message.")] = None,
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Merge a pull request into its target; exits 1 with the reason when refused (a failing
    check, missing approvals, a request for changes, a conflict, not open).

    Example: zarrlake -r ./myrepo pr merge 3 --author alice
    """
    who = _author(author, by)
    pr = _open(ctx, pr_id)
    commit = pr.merge(author=who, message=message)
    if json_out:
        print_json(pr.to_json(checks=False))
    else:
        console.print(
            f"Merged pull request [bold]#{pr.id}[/] into {escape(pr.target)} as {short(commit)}"
        )


@pr_app.command("close")
def pr_close(
    ctx: typer.Context,
    pr_id: IdArg,
    author: AuthorOpt = None,
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Close a pull request without merging it.

    Example: zarrlake -r ./myrepo pr close 3 --author alice
    """
    _summary(_open(ctx, pr_id).close(author=_author(author, by)), json_out, "Closed")


@pr_app.command("reopen")
def pr_reopen(ctx: typer.Context, pr_id: IdArg, json_out: JsonOpt = False) -> None:
    """Open a closed pull request again.

    Example: zarrlake -r ./myrepo pr reopen 3
    """
    _summary(_open(ctx, pr_id).reopen(), json_out, "Reopened")


def register(app: typer.Typer) -> None:
    """Add the `pr` command group to the command line."""
    app.add_typer(pr_app, name="pr", rich_help_panel=PANEL_REFS)
