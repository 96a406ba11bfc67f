"""Array previews: a 2-D slice, sampled so that no more than a bounded number of stored
chunks is read, coloured with a colour map; NaN and never-written (fill) regions get their
own colours."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import zarr

from zarrlake.errors import InvalidInputError

MAX_PIXELS = 512
"""At most this many samples along each displayed dimension."""
MAX_CHUNKS = 256
"""At most this many stored chunks read for one preview."""
NAN_RGB = (255, 0, 255)
FILL_RGB = (200, 200, 200)


class UnrenderableError(InvalidInputError):
    """The array's data type cannot be drawn as an image."""


@dataclass(frozen=True)
class Selection:
    """Per dimension: an index, or a (start, stop) range for the (at most two) drawn ones."""

    items: tuple[int | tuple[int, int], ...]

    @property
    def drawn(self) -> list[int]:
        """The dimensions drawn (given as ranges), in order."""
        return [d for d, it in enumerate(self.items) if isinstance(it, tuple)]

    def text(self) -> str:
        """The selection as in the `slice` parameter (`start:stop` for drawn dimensions)."""
        return ",".join(
            f"{it[0]}:{it[1]}" if isinstance(it, tuple) else str(it) for it in self.items
        )


def default_selection(shape: tuple[int, ...]) -> Selection:
    """The last two dimensions in full, index 0 of the others."""
    nd = len(shape)
    return Selection(tuple((0, n) if d >= nd - 2 else 0 for d, n in enumerate(shape)))


def _int(text: str, what: str) -> int:
    t = text.strip()
    if not t.lstrip("-").isdigit() or len(t) > 19:
        raise InvalidInputError(f"{what} {text!r} is not an integer; give an integer")
    return int(t)


def parse_selection(text: str, shape: tuple[int, ...]) -> Selection:
    """'5,:,10:200' -> index 5 of dimension 0, all of dimension 1, 10..199 of dimension 2.
    Exactly two ranges (one for a 1-D array); every index within the shape."""
    nd = len(shape)
    if nd == 0:
        raise InvalidInputError(
            "a 0-dimensional array has no 2-D slice to preview; read its value with `zarrlake cat`"
        )
    if len(text) > 1000:
        raise InvalidInputError("slice text is longer than 1000 characters; shorten it")
    parts = text.split(",")
    if len(parts) != nd:
        raise InvalidInputError(
            f"slice {text!r} has {len(parts)} items; the array has {nd} dimensions {shape}"
            "; give one item per dimension"
        )
    items: list[int | tuple[int, int]] = []
    for d, part in enumerate(parts):
        n = shape[d]
        if ":" in part:
            lo_t, _, hi_t = part.partition(":")
            lo = _int(lo_t, f"start of dimension {d}") if lo_t.strip() else 0
            hi = _int(hi_t, f"stop of dimension {d}") if hi_t.strip() else n
            if not 0 <= lo < hi <= n:
                raise InvalidInputError(
                    f"range {part.strip()!r} of dimension {d} must satisfy 0 <= start < stop <= {n}"
                )
            items.append((lo, hi))
        else:
            i = _int(part, f"index of dimension {d}")
            if not 0 <= i < n:
                raise InvalidInputError(
                    f"index {i} of dimension {d} is outside 0..{n - 1}"
                    "; give an index inside the array"
                )
            items.append(i)
    sel = Selection(tuple(items))
    want = min(nd, 2)
    if len(sel.drawn) != want:
        raise InvalidInputError(
            f"slice {text!r} must have exactly {want} ranges (like ':' or '0:100'), "
            "one per displayed dimension"
        )
    return sel


def sample_indices(
    ranges: list[tuple[int, int]], chunks: list[int], max_pixels: int, max_chunks: int
) -> list[np.ndarray]:
    """Evenly spaced indices along each drawn dimension such that at most `max_pixels`
    samples per dimension and at most `max_chunks` distinct chunks are touched in all."""
    steps = [max(1, math.ceil((hi - lo) / max_pixels)) for lo, hi in ranges]

    def touched(d: int) -> int:
        lo, hi = ranges[d]
        return int(np.unique(np.arange(lo, hi, steps[d]) // chunks[d]).size)

    while math.prod(touched(d) for d in range(len(ranges))) > max_chunks:
        d = max(range(len(ranges)), key=touched)
        lo, hi = ranges[d]
        # One sample per chunk at most, then fewer, until the product fits.
        steps[d] = max(steps[d] * 2, chunks[d] if steps[d] < chunks[d] else steps[d] * 2)
        steps[d] = min(steps[d], hi - lo)
    return [np.arange(lo, hi, s) for (lo, hi), s in zip(ranges, steps, strict=True)]


@dataclass
class Preview:
    """A sampled slice: values (2-D, float64), which samples lie in unwritten chunks, and
    how it was sampled."""

    values: np.ndarray
    fill_mask: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    chunks_read: int

    def summary(self) -> dict[str, Any]:
        """Statistics of the sampled values (min, max, NaN and fill counts) and sampling steps."""
        finite = self.values[np.isfinite(self.values) & ~self.fill_mask]
        return {
            "samples": list(self.values.shape),
            "row_step": int(self.rows[1] - self.rows[0]) if self.rows.size > 1 else 1,
            "col_step": int(self.cols[1] - self.cols[0]) if self.cols.size > 1 else 1,
            "chunks_read": self.chunks_read,
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "nan": int(np.isnan(self.values).sum()),
            "fill": int(self.fill_mask.sum()),
        }


def read_preview(
    arr: zarr.Array,
    sel: Selection,
    exists: Any,
    chunk_shape: tuple[int, ...],
    max_pixels: int = MAX_PIXELS,
    max_chunks: int = MAX_CHUNKS,
) -> Preview:
    """Read the sampled slice. `exists(coords)` says whether a stored chunk is there."""
    kind = arr.dtype.kind
    if kind not in "biuf":
        raise UnrenderableError(
            f"an array of dtype {arr.dtype} cannot be drawn as an image (only bool, int, float)"
            "; read its values with `zarrlake cat`"
        )
    drawn = sel.drawn
    ranges = [sel.items[d] for d in drawn]
    idx = sample_indices(ranges, [chunk_shape[d] for d in drawn], max_pixels, max_chunks)
    selection = tuple(idx[drawn.index(d)] if d in drawn else it for d, it in enumerate(sel.items))
    data = np.asarray(arr.get_orthogonal_selection(selection), dtype=np.float64)
    if len(drawn) == 1:
        data = data.reshape(1, -1)
        rows, cols = np.zeros(1, dtype=np.int64), idx[0]
    else:
        rows, cols = idx
    # Which touched chunks are stored: samples in the others show the fill value.
    fill = np.zeros(data.shape, dtype=bool)
    chunk_of = [np.asarray(a) // chunk_shape[d] for a, d in zip(idx, drawn, strict=True)]
    fixed = {d: it // chunk_shape[d] for d, it in enumerate(sel.items) if d not in drawn}
    uniq = [np.unique(c) for c in chunk_of]
    grid_r = uniq[0] if len(drawn) == 2 else np.zeros(1, dtype=np.int64)
    grid_c = uniq[-1]
    for r in grid_r:
        for c in grid_c:
            coords = dict(fixed)
            if len(drawn) == 2:
                coords[drawn[0]], coords[drawn[1]] = int(r), int(c)
            else:
                coords[drawn[0]] = int(c)
            if not exists(tuple(coords[d] for d in range(len(sel.items)))):
                rmask = chunk_of[0] == r if len(drawn) == 2 else np.ones(1, dtype=bool)
                cmask = chunk_of[-1] == c
                fill[np.ix_(rmask, cmask)] = True
    return Preview(data, fill, rows, cols, int(grid_r.size * grid_c.size))


@cache
def _lut() -> np.ndarray:
    from matplotlib import colormaps

    return (colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)


def colorize(p: Preview, vmin: float | None, vmax: float | None) -> np.ndarray:
    """RGB pixels for the preview's values in the value range [vmin, vmax]."""
    v = p.values
    lo = 0.0 if vmin is None else vmin
    hi = lo + 1.0 if vmax is None or vmax <= lo else vmax
    with np.errstate(invalid="ignore"):
        scaled = np.clip((v - lo) / (hi - lo), 0, 1)
    index = np.nan_to_num(scaled * 255, nan=0).astype(np.uint8)
    rgb = _lut()[index]
    rgb[np.isnan(v)] = NAN_RGB
    rgb[p.fill_mask] = FILL_RGB
    return rgb


def png(rgb: np.ndarray, min_side: int = 256, max_side: int = 768) -> bytes:
    """PNG bytes, scaled up with nearest neighbours so small samples stay visible."""
    from PIL import Image

    img = Image.fromarray(rgb, "RGB")
    h, w = rgb.shape[:2]
    scale = max(1, min(max_side // max(h, w), math.ceil(min_side / max(h, w))))
    if scale > 1:
        img = img.resize((w * scale, h * scale), Image.Resampling.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def colorbar_png(width: int = 256, height: int = 16) -> bytes:
    """The colour map from low (left) to high (right)."""
    from PIL import Image

    row = _lut()[np.linspace(0, 255, width).astype(np.uint8)]
    img = Image.fromarray(np.repeat(row[None, :, :], height, axis=0), "RGB")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
