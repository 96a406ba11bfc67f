"""Finding the chunks of one NetCDF4/HDF5 file: VirtualiZarr's HDF parser reads its
metadata through obstore (the same stores zarrlake reads virtual chunks with)."""

from __future__ import annotations

from typing import Any

from zarrlake.errors import InvalidInputError, ZarrLakeError
from zarrlake.storage.sources import SourceReader, split_url
from zarrlake.virtual.model import VirtualDataset, from_xarray


def registry_for(reader: SourceReader, urls: list[str]) -> Any:
    """A VirtualiZarr object-store registry over `reader`'s stores for these URLs."""
    from obspec_utils.registry import ObjectStoreRegistry

    stores: dict[str, Any] = {}
    for url in urls:
        scheme, bucket, _ = split_url(url)
        root = "file:///" if scheme == "file" else f"s3://{bucket}"
        stores.setdefault(root, reader.store(scheme, bucket))
    return ObjectStoreRegistry(stores)


def scan_file(url: str, reader: SourceReader) -> VirtualDataset:
    """The virtual dataset of the file at `url`, with its identity; InvalidInputError naming
    the file if it is missing, not NetCDF4/HDF5, or changes while it is read."""
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser

    before = reader.identity(url)
    opened: list[Any] = []

    def open_local(store: Any, path: str) -> Any:
        """A local file is parsed from the file itself (obstore's block reader costs a
        runtime hop per read)."""
        opened.append(open(f"/{path.lstrip('/')}", "rb"))  # noqa: SIM115 (closed below)
        return opened[-1]

    parser = HDFParser(reader_factory=open_local) if url.startswith("file:") else HDFParser()
    try:
        vds = open_virtual_dataset(url, registry=registry_for(reader, [url]), parser=parser)
    except ZarrLakeError:
        raise
    except Exception as e:  # h5py and the parser raise many kinds for a damaged file
        raise InvalidInputError(
            f"{url} is not a readable NetCDF4/HDF5 file: {type(e).__name__}: {e}"
        ) from e
    finally:
        for f in opened:
            f.close()
    if reader.identity(url) != before:
        raise InvalidInputError(
            f"{url} changed while it was being imported; import it again once it stops changing"
        )
    return from_xarray(vds, {url: before}, label=url)
