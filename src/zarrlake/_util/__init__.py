"""Small internal helpers every layer may use: the runtime (clock, waits, threads, process
identity), retries, fork safety, crash points for tests, registries of backends, input
validation and zarr metadata parsing. Not part of the public API."""
