"""`zarrlake stats`: counts at a ref (commits, arrays, chunks and bytes) and the value
statistics of an array's chunks (a summary, every chunk with --chunks, or their backfill)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer

from zarrlake.cli.context import (
    PANEL_DATA,
    REF_HELP,
    console,
    escape,
    options,
    print_json,
    usage_error,
)
from zarrlake.present import short

ArrayArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[ARRAY]",
        help="An array path, e.g. weather/t2m: its chunks' value statistics.",
        show_default=False,
    ),
]


def stats(
    ctx: typer.Context,
    ref: Annotated[str | None, typer.Argument(metavar="REF", help=REF_HELP)] = None,
    array: ArrayArg = None,
    chunks: Annotated[
        bool, typer.Option("--chunks", help="Every chunk of ARRAY, one line each.")
    ] = False,
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill",
            help="Read the chunks of ARRAY that lack statistics and commit theirs on the "
            "branch REF, in one commit that changes no chunk.",
        ),
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="With --chunks: print at most this many chunks."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Counts at REF (default main): commits, groups, arrays, stored chunks and bytes,
    virtual chunks and the bytes they refer to in their source files. With ARRAY: the value
    statistics of its chunks, from the manifests (a summary; --chunks prints every chunk's
    count, NaN count, fill count, min, max, sum); --backfill computes those it lacks.

    With --chunks or --backfill a single argument is the ARRAY.

    Example: zarrlake -r ./myrepo stats main weather/t2m --chunks
    """
    if chunks and backfill:
        raise usage_error("--chunks and --backfill exclude each other")
    if limit is not None and not chunks:
        raise usage_error("--limit goes with --chunks")
    if array is None and (chunks or backfill):  # one argument: the ARRAY, at main
        if ref is None:
            raise usage_error("Missing argument 'ARRAY'.")
        ref, array = None, ref
    ref = ref or "main"
    repo = options(ctx).open()
    if array is None:
        _repo_stats(repo, ref, json_out)
    elif backfill:
        _backfill(repo, array, ref, json_out)
    elif chunks:
        _chunks(repo, array, ref, json_out, limit)
    else:
        _summary(repo, array, ref, json_out)


def _repo_stats(repo: Any, ref: str, json_out: bool) -> None:
    from dataclasses import asdict

    s = repo.stats(ref)
    if json_out:
        print_json(asdict(s))
        return
    console.print(
        f"{short(s.commit_id)}: {s.commits} commits, {s.groups} groups, {s.arrays} arrays\n"
        f"stored:  {s.chunks} chunks, {s.bytes} bytes\n"
        f"virtual: {s.virtual_chunks} chunks, {s.virtual_bytes} bytes in "
        f"{s.virtual_sources} source file(s)"
    )


def summarize(table: Any) -> dict[str, Any]:
    """An array's statistics in a few numbers: chunks (and how many have statistics),
    elements, NaN and fill counts, min, max and mean of the chunks known."""
    import pyarrow.compute as pc

    known = table.filter(table["known"])
    count = pc.sum(known["count"]).as_py() or 0
    nan = pc.sum(known["nan_count"]).as_py() or 0
    total = pc.sum(known["sum"]).as_py()
    lo, hi = pc.min(known["min"]).as_py(), pc.max(known["max"]).as_py()
    values = count - nan
    return {
        "chunks": table.num_rows,
        "known": known.num_rows,
        "unknown": table.num_rows - known.num_rows,
        "count": count,
        "nan_count": nan,
        "fill_count": pc.sum(known["fill_count"]).as_py() or 0,
        "min": lo,
        "max": hi,
        "mean": total / values if values and total is not None else None,
    }


def _summary(repo: Any, array: str, ref: str, json_out: bool) -> None:
    doc = {"array": array.strip("/"), "ref": ref, **summarize(repo.chunk_stats(array, ref))}
    if json_out:
        print_json(doc)
        return
    unknown = f", {doc['unknown']} unknown" if doc["unknown"] else ""
    console.print(
        f"{escape(doc['array'])} at {escape(ref)}: {doc['chunks']} chunks "
        f"({doc['known']} with statistics{unknown})\n"
        f"elements: {doc['count']}, NaN: {doc['nan_count']}, fill value: {doc['fill_count']}\n"
        f"min {_num(doc['min'])}, max {_num(doc['max'])}, mean {_num(doc['mean'])}"
        + ("\n(zarrlake stats --backfill ARRAY computes the unknown ones)" if unknown else "")
    )


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _chunks(repo: Any, array: str, ref: str, json_out: bool, limit: int | None) -> None:
    table = repo.chunk_stats(array, ref)
    if limit is not None:
        table = table.slice(0, limit)
    if json_out:
        print_json(table.to_pylist())
        return
    from rich.table import Table

    out = Table(box=None, show_header=True, header_style="bold")
    for name in table.column_names:
        out.add_column(name, justify="right")
    for row in table.to_pylist():
        out.add_row(*(_num(v) for v in row.values()))
    console.print(out)


def _backfill(repo: Any, array: str, branch: str, json_out: bool) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    err = Console(stderr=True)
    progress = Progress(
        TextColumn("reading chunks"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
        disable=json_out or not err.is_terminal,
    )
    task = progress.add_task("backfill", total=None)
    with progress:
        report = repo.backfill_chunk_stats(
            array,
            branch,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total),
        )
    if json_out:
        print_json(report.to_json())
        return
    skipped = f"; {report.skipped} could not be decoded" if report.skipped else ""
    if report.commit is None:
        console.print(f"{escape(array)}: every chunk on {escape(branch)} has statistics{skipped}")
        return
    console.print(
        f"{escape(branch)}: statistics of {report.chunks} chunk(s) of {escape(array)} in "
        f"{short(report.commit)}{skipped}"
    )


def register(app: typer.Typer) -> None:
    """Add `stats` to the command line."""
    app.command("stats", rich_help_panel=PANEL_DATA)(stats)
