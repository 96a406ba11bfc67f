"""The transaction engine behind Session: session records, staging, reads, writes, commit."""
