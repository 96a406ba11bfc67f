"""Test kit shipped with zarrlake (as zarr.testing): conformance suites any backend's tests
subclass (`zarrlake.testing.metastore.MetaStoreTests`,
`zarrlake.testing.storage.ObjectStoreTests`; they need pytest) and fault injection
(`zarrlake.testing.faults`). Nothing in the library imports this package."""
