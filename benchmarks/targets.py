"""The table's rows and targets, read from benchmarks/targets.toml (its header says what each
field means): what each row shows, and the check that decides "Met"."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ZL, IC, ZR = "zarrlake", "icechunk", "zarr"
TARGETS = Path(__file__).resolve().with_name("targets.toml")

Medians = dict[str, float]
Values = dict[str, list[float]]
Metric = Callable[[dict[str, Any]], float | None]
Check = Callable[[Medians, Values], bool]


@dataclass
class Row:
    """One line of the main table."""

    table: str
    label: str
    metric: str | Metric
    target: str = ""
    check: Check | None = None
    always: bool = False  # shown as "not run" when its workload did not run


@dataclass
class SparkRow:
    """One line of the Spark section; `check` is on the median."""

    label: str
    metric: str
    target: str
    check: Callable[[float], bool] | None


@functools.cache
def _load(path: Path = TARGETS) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def ratio(m: Medians, a: str, b: str) -> float | None:
    """m[a] / m[b], or None when either is missing or m[b] is 0."""
    if a in m and b in m and m[b]:
        return m[a] / m[b]
    return None


def label_values(cfg: dict[str, Any]) -> dict[str, Any]:
    """What a label's {name} can be: the configuration and a few figures derived from it."""
    n5, w = cfg["w5_commits"], cfg["w5_window"]
    s5, sw = cfg.get("s3_w5_commits", 0), cfg.get("s3_w5_window", 0)
    return {
        "gc_garbage": 1000,
        **cfg,
        "w5_early": f"1-{w}",
        "w5_late": f"{n5 - w + 1}-{n5}",
        "s3_w5_early": f"1-{sw}",
        "s3_w5_late": f"{s5 - sw + 1}-{s5}",
        "latency": f"{cfg.get('rt_s3_ms', 20):g} ms per S3 / {cfg.get('rt_pg_ms', 1):g} ms "
        "per PG round trip",
        "whole": "begin + open array + write 1 chunk + commit",
        **{
            f"scale_{name[0]}": point
            for name, point in cfg.get("scale_points", {}).items()
            if name.endswith("1")
        },
        "call": "the commit call alone",
    }


def metric(spec: str | dict[str, Any]) -> str | Metric:
    """A record's key, or the function computing a derived figure (see targets.toml)."""
    if isinstance(spec, str):
        return spec
    (kind, keys), *rest = spec.items()
    if kind == "max":
        return lambda r: max(r.get(k, 0.0) for k in keys) if keys[0] in r else None
    if kind == "sum":
        return lambda r: float(sum(r.get(k, 0) for k in keys)) if keys[0] in r else None
    if kind == "first":
        return lambda r: next((r[k] for k in keys if k in r), None)
    if kind == "minus":
        a, b = keys
        return lambda r: r[a] - r[b] if a in r and b in r else None
    if kind == "mib":
        needs = dict(rest).get("requires", keys)
        return lambda r: r[keys] / 2**20 if keys in r and needs in r else None
    raise ValueError(f"targets.toml: unknown metric {spec}")


def _condition(spec: dict[str, Any]) -> Check:
    of = spec.get("of", IC)
    if "ratio_min" in spec:
        return lambda m, _: (r := ratio(m, ZL, of)) is not None and r >= spec["ratio_min"]
    if "ratio_max" in spec:
        return lambda m, _: (r := ratio(m, ZL, of)) is not None and r <= spec["ratio_max"]
    if "ratio_below" in spec:
        return lambda m, _: (r := ratio(m, ZL, of)) is not None and r < spec["ratio_below"]
    if "inverse_max" in spec:
        return lambda m, _: (r := ratio(m, of, ZL)) is not None and r <= spec["inverse_max"]
    if "max" in spec:
        return lambda m, _: ZL in m and m[ZL] <= spec["max"]
    if "min" in spec:
        return lambda m, _: ZL in m and m[ZL] >= spec["min"]
    if "plus_max" in spec:  # zarrlake <= engine + x (e.g. MB read over Icechunk's)
        return lambda m, _: ZL in m and of in m and m[ZL] <= m[of] + spec["plus_max"]
    if "excess_max" in spec:  # (zarrlake - base) <= x * (engine - base): cost added over base
        base = spec["over"]
        return lambda m, _: (
            all(e in m for e in (ZL, of, base))
            and m[ZL] - m[base] <= spec["excess_max"] * (m[of] - m[base])
        )
    if spec.get("all_zero"):
        return lambda _, v: bool(v.get(ZL)) and max(v[ZL]) == 0
    raise ValueError(f"targets.toml: unknown check {spec}")


def check(specs: list[dict[str, Any]] | None) -> Check | None:
    """All of the conditions `specs` (None: the row has no target)."""
    if not specs:
        return None
    conditions = [_condition(s) for s in specs]
    return lambda m, v: all(c(m, v) for c in conditions)


def rows(cfg: dict[str, Any], path: Path = TARGETS) -> list[Row]:
    """The main table's rows, labels filled from `cfg`."""
    values = label_values(cfg)
    return [
        Row(
            table=r["table"],
            label=r["label"].format(**values),
            metric=metric(r["metric"]),
            target=r.get("target", ""),
            check=check(r.get("check")),
            always=r.get("always", False),
        )
        for r in _load(path)["row"]
    ]


def spark_rows(path: Path = TARGETS) -> list[SparkRow]:
    """The Spark section's rows."""
    out = []
    for r in _load(path).get("spark", []):
        spec = r.get("check")
        test = None
        if spec is not None and "min" in spec:
            test = functools.partial(lambda lo, v: v >= lo, spec["min"])
        elif spec is not None:
            test = functools.partial(lambda hi, v: v <= hi, spec["max"])
        out.append(SparkRow(r["label"], r["metric"], r.get("target", ""), test))
    return out
