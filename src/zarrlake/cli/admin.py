"""Repository-level commands: init, fsck and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from zarrlake.cli.context import console, options, print_json, short


def init(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Create a new, empty repository (one initial commit on main).

    Example: zarrlake -r ./myrepo init
    """
    from zarrlake.repo import Repo

    opts = options(ctx)
    repo = Repo.create(
        opts.repo, metastore=opts.metastore, storage_options=opts.storage_options or None
    )
    head = repo.resolve("main")
    if json_out:
        print_json({"location": repo.spec.location, "metastore": repo.spec.metastore, "main": head})
        return
    console.print(f"Initialized empty zarrlake repository at [bold]{repo.spec.location}[/]")
    console.print(f"  metastore: {repo.spec.metastore}")
    console.print(f"  main -> {short(head)}")


def fsck(
    ctx: typer.Context,
    ref: Annotated[
        str | None, typer.Argument(help="Check only what this ref reaches (default: all refs).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print problems as JSON.")] = False,
) -> None:
    """Verify every object reachable from REF (or every branch and tag): checksums,
    missing objects, inconsistent references. Exits 1 if anything is wrong.

    Example: zarrlake -r ./myrepo fsck main
    """
    repo = options(ctx).open()
    problems = [str(p) for p in repo.fsck(ref)]
    if json_out:
        print_json({"ref": ref, "ok": not problems, "problems": problems})
    elif problems:
        console.print(f"[red]{len(problems)} problem(s) found:[/]")
        for p in problems:
            console.print(f"  {p}", markup=False)
    else:
        what = f"ref {ref!r}" if ref else "all branches and tags"
        console.print(f"[green]ok[/]: every object reachable from {what} verified")
    if problems:
        raise typer.Exit(1)


def demo(
    directory: Annotated[
        Path,
        typer.Option(
            "--dir",
            help="Where to build the demo repository: a new or empty directory, or one an "
            "earlier demo made (replaced).",
        ),
    ] = Path("demo-repo"),
    days: Annotated[int, typer.Option(min=3, max=366, help="Days of hourly data.")] = 30,
    small: Annotated[
        bool, typer.Option("--small", help="A small grid (for tests and slow machines).")
    ] = False,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print what happened as JSON (the story goes to stderr)."),
    ] = False,
) -> None:
    """Run the product tour: Spark ingestion (one commit per day), tags and time travel,
    concurrent writers and conflicts, a failed job that leaves no trace, a merge, and a
    summary. Refuses a directory that holds anything but an earlier demo.

    Example: zarrlake demo --dir /tmp/demo --days 10 --small
    """
    from zarrlake.demo import DemoConfig, Narrator, run

    result = run(
        DemoConfig.sized(directory=directory, days=days, small=small), Narrator(stderr=json_out)
    )
    if json_out:
        print_json(result.to_json())


def register(app: typer.Typer) -> None:
    app.command()(init)
    app.command()(fsck)
    app.command()(demo)
