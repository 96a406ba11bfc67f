"""Version control: immutable objects, refs, the commit protocol, conflicts, diff, fsck."""
