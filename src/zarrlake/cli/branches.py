"""Branches and tags: list, create, delete."""

from __future__ import annotations

from typing import Annotated

import typer

from zarrlake.cli.context import (
    PANEL_REFS,
    console,
    deprecated,
    escape,
    options,
    print_json,
    usage_line,
)
from zarrlake.present import short

branch_app = typer.Typer(
    help="List, create or delete branches (default: list).\n\n"
    "Example: zarrlake -r ./myrepo branch create dev --at main",
    invoke_without_command=True,
    no_args_is_help=False,
)
tag_app = typer.Typer(
    help="List, create or delete tags; tags never move (default: list).\n\n"
    "Example: zarrlake -r ./myrepo tag create v1.0 --at main",
    invoke_without_command=True,
    no_args_is_help=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]


def _list(ctx: typer.Context, kind: str, json_out: bool) -> None:
    repo = options(ctx).open()
    refs = repo.list_branches() if kind == "branch" else repo.list_tags()
    if json_out:
        print_json(dict(sorted(refs.items())))
        return
    if not refs:
        console.print(f"(no {kind}es)" if kind == "branch" else "(no tags)")
        return
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold")
    table.add_column(kind)
    table.add_column("commit")
    table.add_column("message")
    for name, cid in sorted(refs.items()):
        message = repo.log(cid, limit=1)[0].message
        table.add_row(name, short(cid), escape(message))
    console.print(table)


def _add_listing(app: typer.Typer, kind: str) -> None:
    """`list`, and the group's default action, for branches or tags."""

    def default(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        if ctx.invoked_subcommand is None:
            _list(ctx, kind, json_out)

    def listing(ctx: typer.Context, json_out: JsonOpt = False) -> None:
        _list(ctx, kind, json_out)

    plural = "branches" if kind == "branch" else "tags"
    listing.__doc__ = (
        f"List {plural} and the commits they point at.\n\n"
        f"Example: zarrlake -r ./myrepo {kind} list --json"
    )
    app.callback()(default)
    app.command("list")(listing)


def _created(kind: str, name: str, cid: str, json_out: bool) -> None:
    if json_out:
        print_json({kind: name, "commit": cid})
    else:
        console.print(f"Created {kind} [bold]{name}[/] at {short(cid)}")


_add_listing(branch_app, "branch")
_add_listing(tag_app, "tag")


@branch_app.command("create")
def branch_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The new branch's name.")],
    at: Annotated[str, typer.Option(help="Branch, tag or commit id to start from.")] = "main",
    json_out: JsonOpt = False,
) -> None:
    """Create branch NAME at a ref (default main).

    Example: zarrlake -r ./myrepo branch create experiment --at v1.0
    """
    _created("branch", name, options(ctx).open().create_branch(name, at=at), json_out)


@branch_app.command("delete")
def branch_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Branch to delete.")],
    json_out: JsonOpt = False,
) -> None:
    """Delete branch NAME. Its commits stay readable by id until a gc reclaims those that
    no other branch or tag reaches; its open sessions can no longer commit.

    Example: zarrlake -r ./myrepo branch delete experiment
    """
    repo = options(ctx).open()
    was = repo.list_branches().get(name)
    repo.delete_branch(name)
    orphaned = [s.id for s in repo.list_sessions(name)]
    if json_out:
        print_json({"deleted_branch": name, "commit": was, "open_sessions": orphaned})
        return
    console.print(f"Deleted branch [bold]{escape(name)}[/] (was {short(was)})")
    if orphaned:
        console.print(
            f"[yellow]{len(orphaned)} open session(s) of it can no longer commit[/] "
            f"({', '.join(orphaned)}): abandon them, or create the branch again to commit there"
        )


@branch_app.command("protect", cls=usage_line("{PATTERN}"))
def branch_protect(
    ctx: typer.Context,
    pattern: Annotated[
        str | None,
        typer.Argument(
            metavar="PATTERN", help="Branch name or glob (release/*).", show_default=False
        ),
    ] = None,
    allow_direct_commits: Annotated[
        bool, typer.Option(help="Let sessions commit to it directly (not only merges).")
    ] = False,
    allow_delete: Annotated[bool, typer.Option(help="Let the branch be deleted.")] = False,
    require_pull_request: Annotated[
        bool, typer.Option(help="Refuse direct merges: only a pull request's merge lands.")
    ] = False,
    required_approvals: Annotated[
        int, typer.Option(help="Approvals a pull request into it needs.", min=0)
    ] = 0,
    dismiss_stale_approvals: Annotated[
        bool, typer.Option(help="Approvals stop counting when the source branch moves.")
    ] = False,
    allow_squash: Annotated[
        bool, typer.Option(help="Let the branch's history be squashed (zarrlake squash).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Protect branches matching PATTERN: sessions cannot commit to them directly (merge,
    revert or reset instead), they cannot be deleted and their history cannot be squashed,
    unless allowed. `branch protections` lists the rules.

    Example: zarrlake -r ./myrepo branch protect main
    """
    if pattern is None:  # the old way to list the rules
        deprecated("branch protect", "zarrlake branch protections")
        _protections(ctx, json_out)
        return
    repo = options(ctx).open()
    repo.protect_branch(
        pattern,
        allow_direct_commits=allow_direct_commits,
        allow_delete=allow_delete,
        require_pull_request=require_pull_request,
        required_approvals=required_approvals,
        dismiss_stale_approvals=dismiss_stale_approvals,
        allow_squash=allow_squash,
    )
    if json_out:
        print_json({pattern: repo.list_protected_branches()[pattern]})
        return
    console.print(f"Protected [bold]{escape(pattern)}[/]")


@branch_app.command("protections")
def branch_protections(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the branch protection rules: what each pattern allows.

    Example: zarrlake -r ./myrepo branch protections --json
    """
    _protections(ctx, json_out)


def _protections(ctx: typer.Context, json_out: bool) -> None:
    rules = options(ctx).open().list_protected_branches()
    if json_out:
        print_json(rules)
        return
    if not rules:
        console.print("(no protected branches)")
        return
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold")
    for col in ("pattern", "direct commits", "delete", "pull requests", "squash"):
        table.add_column(col)
    for name, rule in rules.items():
        yes = {True: "allowed", False: "refused"}
        table.add_row(
            escape(name),
            yes[rule["allow_direct_commits"]],
            yes[rule["allow_delete"]],
            _pull_request_rule(rule),
            yes[bool(rule.get("allow_squash"))],
        )
    console.print(table)


def _pull_request_rule(rule: dict) -> str:
    """What a rule asks of pull requests, as the rules table shows it."""
    parts = ["required"] if rule.get("require_pull_request") else []
    if rule.get("required_approvals"):
        parts.append(f"{rule['required_approvals']} approval(s)")
    if rule.get("dismiss_stale_approvals"):
        parts.append("stale approvals dismissed")
    return ", ".join(parts) or "-"


@branch_app.command("unprotect")
def branch_unprotect(
    ctx: typer.Context,
    pattern: Annotated[str, typer.Argument(help="The rule's branch name or glob.")],
    json_out: JsonOpt = False,
) -> None:
    """Remove the protection rule for PATTERN.

    Example: zarrlake -r ./myrepo branch unprotect main
    """
    repo = options(ctx).open()
    repo.unprotect_branch(pattern)
    if json_out:
        print_json({"unprotected": pattern})
    else:
        console.print(f"Removed protection of [bold]{escape(pattern)}[/]")


@tag_app.command("create")
def tag_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The new tag's name.")],
    at: Annotated[str, typer.Option(help="Branch, tag or commit id to tag.")],
    json_out: JsonOpt = False,
) -> None:
    """Create tag NAME pointing at a ref; it never moves.

    Example: zarrlake -r ./myrepo tag create v1.0 --at main
    """
    _created("tag", name, options(ctx).open().create_tag(name, at=at), json_out)


@tag_app.command("delete")
def tag_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Tag to delete.")],
    json_out: JsonOpt = False,
) -> None:
    """Delete tag NAME.

    Example: zarrlake -r ./myrepo tag delete v1.0
    """
    repo = options(ctx).open()
    was = repo.list_tags().get(name)
    repo.delete_tag(name)
    if json_out:
        print_json({"deleted_tag": name, "commit": was})
    else:
        console.print(f"Deleted tag [bold]{escape(name)}[/] (was {short(was)})")


def register(app: typer.Typer) -> None:
    """Add the `branch` and `tag` command groups to the command line."""
    app.add_typer(branch_app, name="branch", rich_help_panel=PANEL_REFS)
    app.add_typer(tag_app, name="tag", rich_help_panel=PANEL_REFS)
