"""The zarr v3 store of a session (`store.py`), and the codec pipeline that zarr uses for
arrays on it (`pipeline.py`): chunk bytes that do not decode raise a zarrlake error naming
the chunk, and a Dask task's copy of a session finishes after each array write."""

from zarrlake.zarr_store.store import SessionStore, StoreEngine, StoreSession

__all__ = ["SessionStore", "StoreEngine", "StoreSession"]
