"""Copies of a repository: export (a version as plain Zarr v3), clone and pull."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from zarrlake.cli.context import (
    PANEL_DATA,
    PANEL_SETUP,
    RefArg,
    console,
    escape,
    options,
    parse_storage_option,
    print_json,
)
from zarrlake.cli.lifecycle import Bars, human

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]


def _dest_options(ctx: typer.Context, given: list[str] | None) -> dict[str, Any] | None:
    """The destination's storage options: those given with --dest-option, else the
    repository's own (the same endpoint and credentials)."""
    from zarrlake.cli.redact import is_secret_option, redact

    if given:
        opts = dict(parse_storage_option(o) for o in given)
        redact.add(v for k, v in opts.items() if is_secret_option(k))
        return opts
    return options(ctx).storage_options or None


DestOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dest-option",
        help="A storage option of the destination, KEY=VALUE (repeatable; default: the "
        "repository's own options).",
    ),
]


class ByteBar(Bars):
    """A progress bar of bytes on stderr (so --json output on stdout stays clean)."""

    def __init__(self, enabled: bool, what: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        err = Console(stderr=True)
        self.progress = Progress(
            TextColumn(what),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not enabled or not err.is_terminal,
        )
        self.tasks = {what: self.progress.add_task(what, total=None)}
        self.what = what

    def __call__(self, done: int, total: int | None) -> None:  # type: ignore[override]
        """Show `done` of `total` bytes (the export progress callback)."""
        self.progress.update(self.tasks[self.what], completed=done, total=total)


def export(
    ctx: typer.Context,
    ref: RefArg,
    dest: Annotated[str, typer.Argument(help="An empty directory or s3:// prefix.")],
    array: Annotated[
        list[str] | None,
        typer.Option("--array", help="Only this array or group (repeatable; default: all)."),
    ] = None,
    materialize: Annotated[
        bool,
        typer.Option(
            "--materialize",
            help="Read virtual chunks from their sources and write them (default: refuse).",
        ),
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Delete what DEST holds first.")
    ] = False,
    workers: Annotated[
        int, typer.Option(min=1, help="Chunks copied at once (local to local: at most two a core).")
    ] = 16,
    dest_option: DestOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the tree at REF to DEST as a plain Zarr v3 hierarchy that zarr and xarray open
    without zarrlake: chunk bytes copied as stored, each checked against its digest; shards
    as zarr reads them; metadata last. Shows a progress bar on a terminal.

    Example: zarrlake -r ./myrepo export v1 ./exported.zarr --array weather
    """
    repo = options(ctx).open()
    with ByteBar(not json_out, "exporting") as bar:
        report = repo.export(
            ref,
            dest,
            arrays=array or None,
            storage_options=_dest_options(ctx, dest_option),
            virtual="materialize" if materialize else "refuse",
            overwrite=overwrite,
            workers=workers,
            progress=bar,
        )
    if json_out:
        print_json(report.to_json())
        return
    rate = report.bytes / max(report.seconds, 1e-9) / 2**20
    console.print(
        f"exported {report.arrays} array(s), {report.chunks} chunk object(s), "
        f"{human(report.bytes)} and {report.documents} metadata document(s) to "
        f"{escape(dest)} in {report.seconds:.2f}s ({rate:.1f} MiB/s)"
    )
    if report.materialized:
        console.print(f"  {report.materialized} virtual chunk(s) read from their sources")


def _print_pull(report: Any, verb: str) -> None:
    console.print(
        f"{verb} {report.commits} commit(s), {report.objects} object(s), "
        f"{human(report.bytes)} in {report.seconds:.2f}s ({report.present} already there)"
    )
    for ref, cid in sorted(report.refs.items()):
        console.print(f"  {escape(ref)} -> {cid[:12]}")
    if report.cut:
        console.print(f"  history cut below {report.cut} commit(s) (--depth)")
    if report.purges:
        console.print(f"  purges brought along: {', '.join(report.purges)}")


def clone(
    ctx: typer.Context,
    dest: Annotated[str, typer.Argument(help="Where the copy goes: a directory or s3:// URL.")],
    ref: Annotated[
        list[str] | None,
        typer.Option("--ref", help="A branch or tag to copy (repeatable; default: all)."),
    ] = None,
    depth: Annotated[
        int | None, typer.Option(min=1, help="Only the last N commits of each ref's history.")
    ] = None,
    dest_metastore: Annotated[
        str | None,
        typer.Option("--dest-metastore", help="The copy's metastore URL (default as for init)."),
    ] = None,
    dest_option: DestOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Make a new repository at DEST with the branches and tags of this one (or --ref) and
    their history (or the last --depth commits), sharing nothing with it. A clone stopped
    half-way goes on when run again; `pull` brings the copy up to date later.

    Example: zarrlake -r s3://bucket/weather clone ./weather-copy --ref main --depth 10
    """
    from zarrlake.repo import Repo

    source = options(ctx).open()
    copy = Repo.clone(
        source,
        dest,
        refs=ref or None,
        depth=depth,
        metastore=dest_metastore,
        storage_options=_dest_options(ctx, dest_option),
    )
    report = copy.last_pull
    assert report is not None
    if json_out:
        print_json({"dest": dest, **report.to_json()})
        return
    console.print(f"cloned {escape(source.spec.location)} into {escape(dest)}")
    _print_pull(report, "copied")


def pull(
    ctx: typer.Context,
    source: Annotated[
        str | None,
        typer.Argument(help="The repository to pull from (default: the one cloned from)."),
    ] = None,
    ref: Annotated[
        list[str] | None,
        typer.Option("--ref", help="A branch or tag to bring (repeatable; default: the clone's)."),
    ] = None,
    depth: Annotated[
        int | None, typer.Option(min=1, help="Only the last N commits of new history.")
    ] = None,
    source_metastore: Annotated[
        str | None, typer.Option("--source-metastore", help="The source's metastore URL.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Move branches and tags of the copy that diverged."),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Bring this copy up to date with SOURCE (default: where it was cloned from), copying
    only the objects it lacks, and its purges. A branch of the copy with commits SOURCE
    lacks is refused (nothing moves) unless --force.

    Example: zarrlake -r ./weather-copy pull
    """
    from zarrlake.repo import Repo

    opts = options(ctx)
    repo = opts.open()
    if source is None:
        made = repo.origin()
        if made is None:
            raise typer.BadParameter("this repository is not a clone: give SOURCE")
        source = made["location"]
    src = Repo.open(
        source, metastore=source_metastore, storage_options=opts.storage_options or None
    )
    report = repo.pull(src, refs=ref or None, depth=depth, force=force)
    if json_out:
        print_json(report.to_json())
        return
    _print_pull(report, "pulled")


def register(app: typer.Typer) -> None:
    """Add `export`, `clone` and `pull` to the command line."""
    app.command(rich_help_panel=PANEL_SETUP)(clone)
    app.command(rich_help_panel=PANEL_SETUP)(pull)
    app.command(rich_help_panel=PANEL_DATA)(export)
