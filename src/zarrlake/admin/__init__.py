"""Administration of a whole repository: moving it to another metastore. It sits beside the
storage lifecycle, above the transaction engine and below the repository."""
