"""A writer process for test_xarray_writers.py: it stages one change in a session of its own,
says "ready", commits when told "commit" on stdin, and prints the outcome as one JSON line."""

from __future__ import annotations

import json
import sys

import numpy as np
import xarray as xr
import zarr

import zarrlake as zl


def stage(session: zl.Session, action: str, name: str) -> None:
    if action == "add_variable":  # the usual way: open, add, write the new variable back
        ds = xr.open_zarr(session.store)
        ds[name] = ("x", np.full(4, float(len(name))))
        ds[[name]].to_zarr(session.store, mode="a")
    elif action == "set_attributes":  # the same attributes, set by every writer
        zarr.open_group(session.store).attrs.update({"title": name, "source": "reanalysis"})
    else:
        raise ValueError(action)


def main(repo_path: str, action: str, name: str) -> None:
    repo = zl.Repo.open(repo_path)
    session = repo.create_session(message=f"{action} {name}")
    stage(session, action, name)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "commit":
        return
    try:
        print(json.dumps({"commit": session.commit(f"{action} {name}")}), flush=True)
    except zl.ConflictError as e:
        print(json.dumps({"conflict": str(e)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
