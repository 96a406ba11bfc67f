"""`python -m zarrlake.testing.servers`: starts moto S3 and PostgreSQL, prints settings that
reach them (for the command line and for Python), and stops both on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from zarrlake.testing.servers import ServerError, running_moto


def read_settings(proc: subprocess.Popen) -> str:
    """The server's output up to its last line (it then waits for a signal)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # ends at EOF should the process exit
        lines.append(line)
        if "Ctrl-C stops them" in line:
            break
    return "".join(lines)


@pytest.mark.slow
def test_servers_command_prints_working_settings_and_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "zarrlake.testing.servers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = read_settings(proc)
        env = dict(re.findall(r"^export (ZARRLAKE_\w+)=(\S+)$", out, re.M))
        snippet = out[out.index("import zarrlake as zl") : out.index("Both servers")]
        # the command line, with the printed variables, on a repository the snippet makes
        namespace: dict = {}
        exec(snippet, namespace)
        namespace["repo"].close()
        res = subprocess.run(
            [str(Path(sys.executable).with_name("zarrlake")), "log", "--json"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert '"message"' in res.stdout
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert set(env) >= {"ZARRLAKE_REPO", "ZARRLAKE_METASTORE", "ZARRLAKE_ENDPOINT_URL"}
    assert "stopping the servers" in proc.stdout.read()
    with pytest.raises(psycopg.OperationalError):  # PostgreSQL is gone
        psycopg.connect(env["ZARRLAKE_METASTORE"], connect_timeout=2)
    with pytest.raises(urllib.error.URLError):  # and so is moto
        urllib.request.urlopen(env["ZARRLAKE_ENDPOINT_URL"], timeout=2)


def test_a_moto_server_that_exits_at_once_is_a_server_error(tmp_path, monkeypatch):
    from zarrlake.testing import servers

    monkeypatch.setattr(servers, "MOTO_LAUNCHER", "import sys; sys.exit('no moto here')")
    log = tmp_path / "moto.log"
    with pytest.raises(ServerError, match="exited") as info, running_moto(log):
        pass
    assert "no moto here" in str(info.value)


def test_help_prints_usage_and_starts_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "zarrlake.testing.servers", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m zarrlake.testing.servers")
    assert "S3 (moto)" not in proc.stdout  # no server was started
