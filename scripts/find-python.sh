#!/usr/bin/env sh
# Prints the path of a Python >= 3.12 that actually runs: $PYTHON, then pyenv's installs,
# then python3.12 / python3.13 on PATH. Exits 1 with a clear message when there is none.
ok() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
if [ -n "${PYTHON:-}" ]; then
  if ok "$PYTHON"; then echo "$PYTHON"; exit 0; fi
  echo "error: PYTHON=$PYTHON does not run as Python >= 3.12" >&2; exit 1
fi
if command -v pyenv >/dev/null 2>&1; then
  for p in $(ls -d "$(pyenv root)"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V); do
    if ok "$p"; then echo "$p"; exit 0; fi
  done
fi
for name in python3.12 python3.13 python3.14 python3; do
  p=$(command -v "$name" 2>/dev/null) || continue
  if ok "$p"; then echo "$p"; exit 0; fi
done
echo "error: no Python >= 3.12 found (tried \$PYTHON, pyenv versions, python3.12/python3.13 on PATH); install one or pass PYTHON=/path/to/python3.12" >&2
exit 1
