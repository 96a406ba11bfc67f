"""Single-engine micro-benchmarks on pytest-benchmark (`make bench` runs them after the
cross-engine suite; `--bench-quick` for small sizes)."""
