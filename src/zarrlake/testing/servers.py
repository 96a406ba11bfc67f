"""Throwaway PostgreSQL and moto S3 servers on 127.0.0.1, for tests, benchmarks and for
trying the many-machine deployment (S3 + PostgreSQL) on one machine:

    python -m zarrlake.testing.servers     # starts both, prints the settings, Ctrl-C stops

PostgreSQL runs from /usr/lib/postgresql/*/bin (15 preferred) as the `postgres` OS user
(PostgreSQL refuses to run as root), in a temporary directory that also holds its unix
socket, on a free port. TCP logins use scram-sha-256 passwords; the unix socket trusts local
users. Durability is off (fsync, synchronous_commit): the data is thrown away.

moto's S3 server runs as a child process on port 0 (the OS picks a free port without a
race); its address is read from its startup line. moto checks If-None-Match and then stores
the object without a lock, so two concurrent conditional PUTs could both succeed; the
launcher serialises moto's PutObject handler to make that check atomic, as on S3.

Both are stopped by PID. Needs `moto[server]` and `psycopg` (the `dev` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "zarrlake-test-superuser"  # a throwaway server on 127.0.0.1 only
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
REGION = "us-east-1"
ACCESS_KEY_ID = SECRET_ACCESS_KEY = "test"  # moto accepts any credentials
_RUNNING_ON = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")

MOTO_LAUNCHER = """
import os
import sys
import threading

import moto.server
from moto.s3.responses import S3Response
from moto.server import main

_put_lock = threading.Lock()
_put_object = S3Response.put_object


def put_object(self):
    with _put_lock:  # make moto's If-None-Match check-then-write atomic, as on S3
        return _put_object(self)


S3Response.put_object = put_object
# moto's handler raises SystemExit, which its HTTP server does not act on for seconds; its
# data lives in memory only, so SIGTERM and SIGINT end the process at once
moto.server.signal_handler = lambda signum, frame: os._exit(0)
main(sys.argv[1:])
"""
"""Python source that runs moto's server with atomic conditional PUTs (`python -c`)."""


class ServerError(RuntimeError):
    """A server could not be started: its binaries are missing, or it exited or stalled
    during start-up (the message holds the end of its log)."""


# PostgreSQL -----------------------------------------------------------------------------------


def find_postgres_bin() -> Path:
    """The bin directory of the PostgreSQL server install (15 preferred, else the newest)."""
    found: dict[int, Path] = {}
    for path in glob.glob("/usr/lib/postgresql/*/bin"):
        name = Path(path).parent.name
        if name.isdigit() and all(
            (Path(path) / tool).exists() for tool in ("initdb", "postgres", "pg_ctl")
        ):
            found[int(name)] = Path(path)
    if not found:
        raise ServerError(
            "PostgreSQL server binaries not found (looked for initdb, postgres and pg_ctl in "
            "/usr/lib/postgresql/*/bin); install them with: apt-get install postgresql-15"
        )
    return found.get(15) or found[max(found)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres_user() -> dict[str, Any]:
    """subprocess arguments that drop root to the postgres OS user (no-op for non-root)."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise ServerError(
            "running as root, and PostgreSQL needs a non-root `postgres` OS user to run as"
        ) from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _chown_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _wait_for_postgres(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Poll until the server accepts a login; raise with its log if it exits or stalls."""
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"PostgreSQL exited during startup:\n{log.read_text()[-3000:]}")
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError as e:
            last = e
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)  # the pause between polls; returns early if it dies
    raise ServerError(
        f"PostgreSQL did not accept connections within {START_TIMEOUT:.0f} s ({last}):\n"
        f"{log.read_text()[-3000:]}"
    )


def _stop_postgres(bindir: Path, data: Path, proc: subprocess.Popen) -> None:
    """pg_ctl stop -m fast; then kill the postmaster by PID if it is still alive."""
    if proc.poll() is None:
        subprocess.run(
            [str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", "30"],
            capture_output=True,
            check=False,
            **_as_postgres_user(),
        )
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """Start a throwaway PostgreSQL server; yields its superuser URL (database `postgres`),
    then stops it by PID and deletes its directory.

    Raises
    ------
    ServerError
        The binaries or the `postgres` OS user are missing, or the server did not start.
    """
    bindir = find_postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="zarrlake-pg-"))
    proc: subprocess.Popen | None = None
    data = root / "data"
    try:
        _chown_to_postgres(root)
        pwfile = root / "pwfile"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        _chown_to_postgres(pwfile)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "HOME": str(root)}
        init = subprocess.run(
            [
                str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER,
                "--pwfile", str(pwfile), "--auth-local=trust", "--auth-host=scram-sha-256",
                "--encoding=UTF8", "--locale=C", "--no-sync",
            ],
            capture_output=True, text=True, env=env, check=False, **_as_postgres_user(),
        )  # fmt: skip
        if init.returncode != 0:
            raise ServerError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        port = free_port()
        log = root / "postgres.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root),
                    "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
                    "-c", "fsync=off", "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off",
                ],
                stdout=out, stderr=subprocess.STDOUT, env=env, **_as_postgres_user(),
            )  # fmt: skip
        url = f"postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{port}/postgres"
        _wait_for_postgres(proc, url, log)
        yield url
    finally:
        if proc is not None:
            _stop_postgres(bindir, data, proc)
        shutil.rmtree(root, ignore_errors=True)


def create_database(admin_url: str, owner: str | None = None, name: str | None = None) -> str:
    """Create a database (`name`, default test_<random>) on the server; returns its name."""
    import psycopg

    name = name or f"test_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        owned = f" OWNER {owner}" if owner else ""
        conn.execute(f"CREATE DATABASE {name}{owned} STRATEGY FILE_COPY")
    return name


def drop_database(admin_url: str, name: str) -> None:
    """Drop a database, disconnecting anyone still on it."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def database_url(admin_url: str, name: str) -> str:
    """`admin_url` pointing at database `name` instead."""
    return admin_url.rsplit("/", 1)[0] + "/" + name


# moto S3 --------------------------------------------------------------------------------------


def _copy_output(stream: IO[bytes], log: IO[bytes], found: dict[str, str], ready: Any) -> None:
    """Copy the server's output to its log until it exits (so its pipe never fills); note
    its address when the startup line passes, and signal `ready` then or at EOF."""
    try:
        with log:
            for line in stream:
                log.write(line)
                log.flush()
                if not ready.is_set() and (m := _RUNNING_ON.search(line.decode(errors="replace"))):
                    found["endpoint"] = m.group(1)
                    ready.set()
    finally:
        ready.set()


def _stop_process(proc: subprocess.Popen) -> None:
    """Terminate a child by PID; kill it if it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def running_moto(log_path: Path | None = None) -> Iterator[str]:
    """Start moto's S3 server on 127.0.0.1; yields its endpoint (http://127.0.0.1:PORT), then
    stops it by PID. Its output goes to `log_path` (default: a temporary file).

    Readiness: werkzeug prints its address once the socket listens, so that line is the
    wait (no polling).

    Raises
    ------
    ServerError
        The server exited or printed no address within START_TIMEOUT seconds.
    """
    with contextlib.ExitStack() as stack:
        if log_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="zarrlake-moto-"))
            log_path = Path(tmp) / "moto.log"
        proc = subprocess.Popen(
            [sys.executable, "-c", MOTO_LAUNCHER, "-H", "127.0.0.1", "-p", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        found: dict[str, str] = {}
        ready = threading.Event()
        copier = threading.Thread(
            target=_copy_output,
            args=(proc.stdout, log_path.open("wb"), found, ready),
            daemon=True,
        )

        def stop() -> None:
            _stop_process(proc)
            if copier.is_alive():
                copier.join(STOP_TIMEOUT)  # it ends at the output's EOF

        stack.callback(stop)
        copier.start()
        started = ready.wait(START_TIMEOUT)
        if "endpoint" not in found:
            if started:  # its output ended: it is exiting (it may not be reaped yet)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(STOP_TIMEOUT)
            state = "did not start" if proc.poll() is None else f"exited ({proc.returncode})"
            stop()
            raise ServerError(
                f"moto server {state} within {START_TIMEOUT:.0f} s:\n"
                + log_path.read_text(errors="replace")[-3000:]
            )
        yield found["endpoint"]


def s3_options(endpoint: str) -> dict[str, Any]:
    """The storage options (`Repo.create(..., storage_options=)`) that reach a moto server."""
    return {
        "endpoint_url": endpoint,
        "region": REGION,
        "access_key_id": ACCESS_KEY_ID,
        "secret_access_key": SECRET_ACCESS_KEY,
        "allow_http": True,
    }


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for a moto server (boto3 comes with moto)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )


# both -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalServers:
    """Where the servers of `running_servers` listen, and the settings that reach them."""

    s3_endpoint: str
    bucket: str
    admin_url: str  # PostgreSQL superuser, database `postgres`
    metastore_url: str  # PostgreSQL superuser, the database made for zarrlake

    @property
    def repo_url(self) -> str:
        """A repository location in the bucket."""
        return f"s3://{self.bucket}/repo"

    def storage_options(self) -> dict[str, Any]:
        """`storage_options` for `Repo.create`/`Repo.open` (and the Spark options)."""
        return s3_options(self.s3_endpoint)

    def environment(self) -> dict[str, str]:
        """The ZARRLAKE_* variables the command line reads."""
        return {
            "ZARRLAKE_REPO": self.repo_url,
            "ZARRLAKE_METASTORE": self.metastore_url,
            "ZARRLAKE_ENDPOINT_URL": self.s3_endpoint,
            "ZARRLAKE_REGION": REGION,
            "ZARRLAKE_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "ZARRLAKE_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "ZARRLAKE_ALLOW_HTTP": "1",
        }

    def python_snippet(self) -> str:
        """Python that opens (or creates) the repository on these servers."""
        options = ",\n".join(f"        {k!r}: {v!r}" for k, v in self.storage_options().items())
        return (
            "import zarrlake as zl\n\n"
            "repo = zl.Repo.open_or_create(\n"
            f"    {self.repo_url!r},\n"
            f"    metastore={self.metastore_url!r},\n"
            "    storage_options={\n"
            f"{options},\n"
            "    },\n"
            ")\n"
        )


@contextlib.contextmanager
def running_servers(bucket: str = "zarrlake", database: str = "zarrlake") -> Iterator[LocalServers]:
    """moto S3 with one empty `bucket`, and PostgreSQL with an empty `database`; both stopped
    by PID afterwards.

    Raises
    ------
    ServerError
        A server could not be started.
    """
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(running_moto())
        s3_client(endpoint).create_bucket(Bucket=bucket)
        admin = stack.enter_context(running_postgres())
        create_database(admin, name=database)
        yield LocalServers(endpoint, bucket, admin, database_url(admin, database))


def describe(servers: LocalServers) -> str:
    """What `python -m zarrlake.testing.servers` prints: the settings, shell and Python."""
    exports = "\n".join(f"export {k}={v}" for k, v in servers.environment().items())
    return (
        f"S3 (moto):  {servers.s3_endpoint}, bucket {servers.bucket}\n"
        f"PostgreSQL: {servers.metastore_url}\n\n"
        f"# command line (another shell):\n{exports}\nzarrlake init  # once\nzarrlake log\n\n"
        f"# Python:\n{servers.python_snippet()}\n"
        "Both servers are throwaway (their data is deleted on exit). Ctrl-C stops them.\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Start both servers, print their settings, and stop them on Ctrl-C or SIGTERM."""
    argparse.ArgumentParser(
        prog="python -m zarrlake.testing.servers",
        description="Start a throwaway S3-compatible server (moto) and PostgreSQL, print the "
        "settings that point zarrlake at them, and stop both on Ctrl-C or SIGTERM (their "
        "data is deleted).",
    ).parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with running_servers() as servers:
            print(describe(servers), flush=True)
            stop.wait()
            print("stopping the servers", flush=True)
    except ServerError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
