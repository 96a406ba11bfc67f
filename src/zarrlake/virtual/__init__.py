"""Virtual chunk references: version NetCDF4/HDF5 files where they lie.

`write` stages a VirtualiZarr virtual dataset into a session; `import_files` finds the
chunks of many files and joins them along one dimension; `materialize` copies an array's
virtual chunks into the repository. Reads of virtual chunks go to the source files, one
ranged read per chunk, and fail with StaleVirtualChunkError if a file changed since import.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from zarrlake.errors import InvalidInputError
from zarrlake.virtual.materializing import materialize
from zarrlake.virtual.model import VirtualDataset, concat, from_xarray
from zarrlake.virtual.scan import scan_file
from zarrlake.virtual.writing import write_dataset

if TYPE_CHECKING:
    import xarray as xr

    from zarrlake.session import Session

__all__ = ["import_files", "materialize", "write"]


def write(session: Session, vds: xr.Dataset, group: str = "") -> None:
    """Write a VirtualiZarr virtual dataset into `session` under `group`.

    Parameters
    ----------
    session
        An open session; the caller commits it.
    vds
        A dataset whose `ManifestArray` variables become arrays of virtual chunks (with the
        source's dtype, chunks, fill value and codecs), and whose variables loaded in memory
        (coordinates) are written as ordinary chunks.
    group
        The group to write into ("" for the root); its arrays must not exist yet.

    Raises
    ------
    InvalidInputError
        A reference outside every allowed source prefix (`Repo.add_virtual_source`), a
        missing source, or an array that already exists. Nothing is staged then.
    """
    write_dataset(session, from_xarray(vds, {}, label="the virtual dataset"), group)


def import_files(
    session: Session, urls: Iterable[str], concat_dim: str = "time", group: str = ""
) -> VirtualDataset:
    """Import NetCDF4/HDF5 files as virtual chunks, joined along `concat_dim`.

    The files are joined in the order of its coordinate, in this process
    (`zarrlake.spark.import_virtual` spreads the files over Spark tasks). An existing group
    is appended to along `concat_dim`.

    Parameters
    ----------
    session
        An open session; the caller commits it (one commit for the whole import).
    urls
        `file:///...` or `s3://bucket/...` URLs under allowed source prefixes.
    concat_dim
        The dimension the files follow each other along.
    group
        The group to import into ("" for the root).

    Returns
    -------
    VirtualDataset
        What was staged (coordinates, arrays, sources with their identities).

    Raises
    ------
    InvalidInputError
        A URL outside every allowed prefix, a missing or unreadable file, files that
        overlap or do not match along other dimensions (naming both). Nothing is staged.
    """
    urls = check_urls(session, urls)
    ds = concat([scan_file(u, session._engine.context.objects.sources) for u in urls], concat_dim)
    write_dataset(session, ds, group, append_dim=concat_dim)
    return ds


def check_urls(session: Session, urls: Iterable[str]) -> list[str]:
    """The URLs as a list, each allowed and named once (InvalidInputError otherwise)."""
    from zarrlake.vc.sources import VirtualSources

    if isinstance(urls, str):
        urls = [urls]
    out = list(urls)
    if not out:
        raise InvalidInputError("no files to import; give at least one file")
    twice = sorted(u for u, n in Counter(out).items() if n > 1)
    if twice:
        raise InvalidInputError(f"{twice[0]} is given twice; give each file once")
    ctx = session._engine.context
    VirtualSources(ctx.meta, ctx.refs.partition).check(out)
    return out
