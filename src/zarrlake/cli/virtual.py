"""Virtual chunks on the command line: allowed sources, importing NetCDF4/HDF5 files,
materializing an array's virtual chunks."""

from __future__ import annotations

from typing import Annotated

import typer

from zarrlake.cli.context import (
    PANEL_VIRTUAL,
    console,
    escape,
    options,
    print_json,
)
from zarrlake.present import short

virtual_app = typer.Typer(
    help="Virtual chunk references into NetCDF4/HDF5 files kept where they lie.\n\n"
    "Example: zarrlake -r ./myrepo virtual sources add file:///data/era5",
    no_args_is_help=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]
BranchOpt = Annotated[str, typer.Option(help="Branch to commit on.")]
MessageOpt = Annotated[str | None, typer.Option("-m", "--message", help="Commit message.")]


sources_app = typer.Typer(
    help="The URL prefixes virtual chunks may point into: list (the default), add, remove.\n\n"
    "Example: zarrlake -r ./myrepo virtual sources add s3://archive/era5",
    invoke_without_command=True,
    no_args_is_help=False,
)
PrefixArg = Annotated[str, typer.Argument(help="URL prefix: file:///dir or s3://bucket/dir.")]


def _list_sources(ctx: typer.Context, json_out: bool) -> None:
    prefixes = options(ctx).open().list_virtual_sources()
    if json_out:
        print_json(prefixes)
    elif not prefixes:
        console.print("(no virtual sources allowed: add one with 'virtual sources add PREFIX')")
    else:
        for p in prefixes:
            console.print(p, markup=False)


@sources_app.callback()
def _sources_default(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    if ctx.invoked_subcommand is None:
        _list_sources(ctx, json_out)


@sources_app.command("list")
def sources_list(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the URL prefixes virtual chunks may point into.

    Example: zarrlake -r ./myrepo virtual sources list --json
    """
    _list_sources(ctx, json_out)


@sources_app.command("add")
def sources_add(ctx: typer.Context, prefix: PrefixArg, json_out: JsonOpt = False) -> None:
    """Allow virtual chunks under PREFIX (adding one twice changes nothing); lists them all.

    Example: zarrlake -r ./myrepo virtual sources add s3://archive/era5
    """
    options(ctx).open().add_virtual_source(prefix)
    _list_sources(ctx, json_out)


@sources_app.command("remove")
def sources_remove(ctx: typer.Context, prefix: PrefixArg, json_out: JsonOpt = False) -> None:
    """Stop allowing new virtual chunks under PREFIX (those already committed stay
    readable); lists those left.

    Example: zarrlake -r ./myrepo virtual sources remove s3://archive/era5
    """
    options(ctx).open().remove_virtual_source(prefix)
    _list_sources(ctx, json_out)


def import_virtual(
    ctx: typer.Context,
    urls: Annotated[list[str], typer.Argument(metavar="URL", help="file:// or s3:// URLs.")],
    concat_dim: Annotated[str, typer.Option(help="Dimension the files follow along.")] = "time",
    group: Annotated[str, typer.Option(help="Group to import into (default: root).")] = "",
    branch: BranchOpt = "main",
    message: MessageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Import NetCDF4/HDF5 files as virtual chunks, joined along --concat-dim, in one commit.

    Example: zarrlake -r ./myrepo virtual import --concat-dim time file:///data/era5/*.nc
    """
    from zarrlake.virtual import import_files

    repo = options(ctx).open()
    session = repo.create_session(branch, message=message)
    try:
        ds = import_files(session, urls, concat_dim=concat_dim, group=group)
        cid = session.commit(message or f"Import {len(urls)} file(s) as virtual chunks")
    except BaseException:
        session.abandon()
        raise
    refs = sum(a.refs() for a in ds.arrays.values())
    if json_out:
        print_json({"branch": branch, "commit": cid, "files": len(urls), "virtual_chunks": refs})
        return
    console.print(
        f"{escape(branch)}: imported {len(urls)} file(s), {refs} virtual chunks, "
        f"in [yellow]{short(cid)}[/]"
    )


def materialize(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="The array whose virtual chunks to copy.")],
    branch: BranchOpt = "main",
    message: MessageOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Copy an array's virtual chunks into the repository (one commit), so its source files
    can be retired.

    Example: zarrlake -r ./myrepo virtual materialize t2m
    """
    from zarrlake.virtual import materialize as copy_chunks

    repo = options(ctx).open()
    session = repo.create_session(branch, message=message)
    try:
        n = copy_chunks(session, path)
        cid = session.commit(message or f"Materialize {path}") if n else None
        if cid is None:
            session.abandon()
    except BaseException:
        session.abandon()
        raise
    if json_out:
        print_json({"branch": branch, "commit": cid, "chunks": n})
    elif cid is None:
        console.print(f"{escape(path)} has no virtual chunks: nothing to commit")
    else:
        console.print(f"{escape(branch)}: copied {n} chunk(s) of {escape(path)} in {short(cid)}")


def register(app: typer.Typer) -> None:
    """Add the `virtual` group (sources list/add/remove, import, materialize) to the command
    line; `import-virtual` and `materialize` stay at the top level as hidden aliases."""
    virtual_app.add_typer(sources_app, name="sources")
    virtual_app.command("import")(import_virtual)
    virtual_app.command("materialize")(materialize)
    app.add_typer(virtual_app, name="virtual", rich_help_panel=PANEL_VIRTUAL)
    app.command("import-virtual", hidden=True)(import_virtual)
    app.command("materialize", hidden=True)(materialize)
