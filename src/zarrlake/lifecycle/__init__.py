"""Storage lifecycle: garbage collection and history expiry. It sits above the transaction
engine (a collector recovers and expires session records) and below the repository."""
