"""Immutable, versioned, checksummed encodings of everything a commit makes durable."""
