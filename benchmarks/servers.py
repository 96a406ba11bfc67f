"""The many-machine deployment for the S3PG benchmarks (issue 15): moto's S3 server and a
PostgreSQL server on 127.0.0.1, started by the benchmark runner and stopped by PID.

PostgreSQL comes from `tests/fixtures/postgres.py`'s `running_postgres()` (usable outside
pytest). moto runs from the same launcher text as `tests/fixtures/s3.py` (which makes
conditional PUTs atomic, as on S3); the fixture there is pytest-only, so the context manager
below starts it the same way: port 0, the address read back from the server's startup line.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REGION = "us-east-1"
BUCKET = "zarrlake-bench"
ACCESS_KEY = SECRET_KEY = "test"  # moto accepts any credentials
STOP_TIMEOUT = 10.0
_RUNNING_ON = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")


def _drain(stream: IO[bytes], log: IO[bytes]) -> None:
    """Copy the server's output to its log file until it exits (keeps its pipe from filling)."""
    for line in stream:
        log.write(line)
    log.close()


@contextlib.contextmanager
def running_moto(log_path: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (tests/fixtures/s3.py's launcher); yields its endpoint.
    Readiness: werkzeug prints its address after the socket listens, so reading the output
    up to that line is the wait (no polling)."""
    from tests.fixtures.s3 import _LAUNCHER, _stop

    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, "-H", "127.0.0.1", "-p", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    drain: threading.Thread | None = None
    try:
        assert proc.stdout is not None
        log = log_path.open("wb")
        endpoint = None
        for line in proc.stdout:  # ends at EOF if the server exits
            log.write(line)
            match = _RUNNING_ON.search(line.decode(errors="replace"))
            if match:
                endpoint = match.group(1)
                break
        if endpoint is None:
            log.close()
            proc.wait(timeout=STOP_TIMEOUT)
            raise RuntimeError(
                f"moto server exited with code {proc.returncode}:\n"
                + log_path.read_text(errors="replace")[-3000:]
            )
        drain = threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True)
        drain.start()
        yield endpoint
    finally:
        _stop(proc)
        if drain is not None:
            drain.join(timeout=STOP_TIMEOUT)


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


@contextlib.contextmanager
def remote_servers() -> Iterator[dict[str, Any]]:
    """PostgreSQL + moto S3 with one bucket; yields the settings workers need (`remote`)."""
    from tests.fixtures.postgres import running_postgres

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zarrlake-bench-s3-")))
        endpoint = stack.enter_context(running_moto(tmp / "moto.log"))
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        pg_url = stack.enter_context(running_postgres())
        yield {
            "s3_endpoint": endpoint,
            "bucket": BUCKET,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "pg_url": pg_url,
        }


if __name__ == "__main__":  # manual check: start both, print the settings, stop them
    with remote_servers() as remote:
        print(remote, flush=True)
