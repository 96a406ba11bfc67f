"""Looking at data and arranging it: ls (the group/array tree), cat (a small slice of an
array) and mv (move or rename a group or array)."""

from __future__ import annotations

import json
import math
from typing import Annotated, NamedTuple

import typer

from zarrlake.cli.context import (
    PANEL_DATA,
    REF_HELP,
    AsOfOpt,
    RefArg,
    console,
    escape,
    options,
    print_json,
    usage_error,
    usage_line,
)
from zarrlake.errors import InvalidInputError, NotFoundError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print as JSON.")]
MAX_CAT_VALUES = 100_000


def node_info(path: str, doc: bytes) -> dict:
    """What ls shows of one node, from its zarr.json document."""
    meta = json.loads(doc)
    info: dict = {"path": path, "node_type": meta.get("node_type", "?")}
    if info["node_type"] == "array":
        grid = (meta.get("chunk_grid") or {}).get("configuration") or {}
        dtype = meta.get("data_type")
        info["shape"] = meta.get("shape")
        info["chunks"] = grid.get("chunk_shape")
        info["dtype"] = dtype if isinstance(dtype, str) else json.dumps(dtype)
        info["dimension_names"] = meta.get("dimension_names")
    return info


def _under(path: str, root: str) -> bool:
    return not root or path == root or path.startswith(root + "/")


def ls(
    ctx: typer.Context,
    ref: RefArg = "main",
    path: Annotated[str, typer.Argument(help="Group or array to list (default: root).")] = "",
    as_of: AsOfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the group/array tree at REF with each array's shape, chunk shape, dtype and
    number of stored chunks.

    Example: zarrlake -r ./myrepo ls main weather
    """
    from zarrlake.format.snapshot import is_meta_key, node_path

    session = options(ctx).open().readonly_session(ref, as_of=as_of)
    root = path.strip("/")
    docs = {node_path(k): v for k, v in session.metadata_documents().items()}
    nodes = [node_info(p, d) for p, d in sorted(docs.items()) if _under(p, root)]
    if not nodes and root:
        raise NotFoundError(
            f"no group or array {root!r} at {ref!r}; run `zarrlake ls REF` to see the tree"
        )
    for n in nodes:
        if n["node_type"] == "array":
            prefix = n["path"] + "/" if n["path"] else ""
            n["stored_chunks"] = sum(1 for k in session.list_prefix(prefix) if not is_meta_key(k))
    if json_out:
        print_json(nodes)
        return
    from rich.tree import Tree

    tree_nodes: dict[str, Tree] = {}
    top = Tree(f"[bold]{escape(root or '/')}[/] [dim]at {escape(ref)}[/]")
    for n in nodes:
        p = n["path"]
        if p == root:
            tree_nodes[p] = top
            if n["node_type"] == "array":
                top.label = f"{top.label}  {_describe(n)}"
            continue
        parent = p.rsplit("/", 1)[0] if "/" in p else ""
        branch = tree_nodes.get(parent, top)
        name = escape(p.rsplit("/", 1)[-1])
        label = f"[bold blue]{name}/[/]" if n["node_type"] == "group" else f"{name}  {_describe(n)}"
        tree_nodes[p] = branch.add(label)
    if not nodes:
        top.add("[dim](empty repository: no groups or arrays yet)[/]")
    console.print(top)


def _describe(n: dict) -> str:
    dims = n.get("dimension_names")
    shape = n["shape"]
    shown = (
        "(" + ", ".join(f"{d}={s}" for d, s in zip(dims, shape, strict=False)) + ")"
        if dims and all(dims)
        else str(tuple(shape))
    )
    return escape(
        f"{n['dtype']} {shown} chunks {tuple(n['chunks'] or ())} stored {n['stored_chunks']}"
    )


class Selection(NamedTuple):
    """A `--slice` as written and as parsed: numpy-style items, '...' as Ellipsis."""

    text: str
    items: tuple


def parse_selection(text: str) -> Selection:
    """'0:10,5' -> (slice(0, 10), 5); '...' and ':' allowed. A usage error when it does not
    parse (whether it fits the array is checked against the array: `fit_selection`)."""

    def integer(s: str) -> int | None:
        s = s.strip()
        if not s:
            return None
        try:
            return int(s)
        except ValueError:
            raise usage_error(
                f"bad slice {text!r}: {s!r} is not an integer (use e.g. '0:10,5')"
            ) from None

    items: list = []
    for part in text.split(","):
        part = part.strip()
        if part == "...":
            items.append(Ellipsis)
        elif ":" in part:
            bits = part.split(":")
            if len(bits) > 3:
                raise usage_error(f"bad slice {text!r}: {part!r} has too many ':'")
            step = integer(bits[2]) if len(bits) == 3 else None
            if step is not None and step <= 0:
                raise usage_error(f"bad slice {text!r}: step must be positive")
            items.append(slice(integer(bits[0]), integer(bits[1]), step))
        else:
            value = integer(part)
            if value is None:
                raise usage_error(f"bad slice {text!r}: empty item (use ':' for all)")
            items.append(value)
    if items.count(Ellipsis) > 1:
        raise usage_error(f"bad slice {text!r}: more than one '...'")
    return Selection(text, tuple(items))


def fit_selection(selection: Selection, ndim: int) -> tuple:
    """The selection's items, checked against an array of `ndim` dimensions (refused,
    InvalidInputError, with more items than dimensions)."""
    items = selection.items
    if len([i for i in items if i is not Ellipsis]) > ndim:
        raise InvalidInputError(
            f"bad slice {selection.text!r}: {len(items)} items for an array with {ndim} "
            "dimension(s)"
            "; give at most one item per dimension"
        )
    return items


CAT_WORDS = "[REF] {ARRAY}"


def cat(
    ctx: typer.Context,
    first: Annotated[
        str | None,
        typer.Argument(metavar="[REF]", help=f"Default main. {REF_HELP}", show_default=False),
    ] = None,
    second: Annotated[
        str | None,
        typer.Argument(metavar="ARRAY", help="Array path, e.g. weather/t2m.", show_default=False),
    ] = None,
    selection: Annotated[
        Selection | None,
        typer.Option(
            "--slice",
            metavar="SLICE",
            parser=parse_selection,
            help="numpy-style selection, e.g. '0:10,5' (default: a corner).",
        ),
    ] = None,
    as_of: AsOfOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a small slice of ARRAY as it is at REF (default main).

    Example: zarrlake -r ./myrepo cat v1.0 weather/t2m --slice "0:2,0:3,5"
    """
    import numpy as np
    import zarr

    if first is None:
        raise usage_error("Missing argument 'ARRAY'.")
    ref, array = ("main", first) if second is None else (first, second)
    session = options(ctx).open().readonly_session(ref, as_of=as_of)
    path = array.strip("/")
    doc = session.metadata_documents().get(f"{path}/zarr.json" if path else "zarr.json")
    if doc is None or json.loads(doc).get("node_type") != "array":
        raise NotFoundError(
            f"no array {path!r} at {ref!r}; run `zarrlake ls REF` to see the arrays"
        )
    arr = zarr.open_array(session.store, path=path, mode="r")
    if selection is None:
        items = tuple(slice(0, min(n, 10)) for n in arr.shape)
        shown = ",".join(f"0:{min(n, 10)}" for n in arr.shape)
    else:
        items = fit_selection(selection, arr.ndim)
        shown = selection.text
    try:
        count = math.prod(
            len(range(*s.indices(n))) if isinstance(s, slice) else 1
            for s, n in zip(_expand(items, arr.ndim), arr.shape, strict=True)
        )
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"bad slice {shown!r}: {e}; write it like '0:10,5'") from None
    if count > MAX_CAT_VALUES:
        raise InvalidInputError(
            f"slice {shown!r} selects {count} values; cat prints at most {MAX_CAT_VALUES}"
            "; give a smaller --slice"
        )
    try:
        values = np.asarray(arr[items])
    except IndexError as e:
        raise InvalidInputError(
            f"bad slice {shown!r} for shape {arr.shape}: {e}; give indices inside the shape"
        ) from None
    except Exception as e:  # a codec's error: a virtual chunk's source may have changed
        from zarrlake.virtual.decoding import explained

        found = explained(session, path, e)
        if found is e:
            raise
        raise found from e
    if json_out:
        print_json(
            {
                "array": path,
                "ref": ref,
                "slice": shown,
                "shape": list(values.shape),
                "dtype": str(values.dtype),
                "values": values.tolist(),
            }
        )
        return
    console.print(
        f"[bold]{escape(path)}[{escape(shown)}][/] {values.dtype} {values.shape} "
        f"[dim](array shape {arr.shape})[/]"
    )
    with np.printoptions(threshold=1000, linewidth=console.width or 100, precision=4):
        console.print(str(values.item()) if values.ndim == 0 else str(values), markup=False)


def _expand(selection: tuple, ndim: int) -> tuple:
    """The selection with '...' expanded and missing trailing dimensions filled with ':'."""
    if Ellipsis in selection:
        i = selection.index(Ellipsis)
        fill = (slice(None),) * (ndim - len(selection) + 1)
        selection = selection[:i] + fill + selection[i + 1 :]
    return selection + (slice(None),) * (ndim - len(selection))


def mv(
    ctx: typer.Context,
    src: Annotated[str, typer.Argument(help="The group or array to move.")],
    dst: Annotated[str, typer.Argument(help="Its new path (its parent group must exist).")],
    message: Annotated[str | None, typer.Option("-m", "--message", help="Commit message.")] = None,
    branch: Annotated[str, typer.Option(help="The branch to commit the move on.")] = "main",
    author: Annotated[str | None, typer.Option(help="Author of the commit.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Move (rename) SRC, with everything below it, to DST in one commit on a branch. No
    chunk is copied: the commit points at the same bytes under their new keys.

    Example: zarrlake -r ./myrepo mv temperature t2m -m "Rename temperature to t2m"
    """
    repo = options(ctx).open()
    text = message if message is not None else f"Move {src.strip('/')} to {dst.strip('/')}"
    with repo.create_session(branch, message=text, author=author) as session:
        session.move(src, dst)
        cid = session.commit()
    if json_out:
        print_json({"branch": branch, "commit": cid, "from": src.strip("/"), "to": dst.strip("/")})
        return
    console.print(
        f"{escape(branch)}: moved {escape(src.strip('/'))} to {escape(dst.strip('/'))} in "
        f"[yellow]{cid[:12]}[/]",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Add `ls`, `cat` and `mv` to the command line."""
    app.command(rich_help_panel=PANEL_DATA)(ls)
    app.command(rich_help_panel=PANEL_DATA, cls=usage_line(CAT_WORDS))(cat)
    app.command(rich_help_panel=PANEL_DATA)(mv)
