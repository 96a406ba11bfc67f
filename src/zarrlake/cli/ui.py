"""`zarrlake ui`: serve the read-only web UI for the repository."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
from typing import Annotated

import typer

from zarrlake.cli.context import PANEL_TOOLS, options, usage_error
from zarrlake.errors import InvalidInputError


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ["localhost", "127.0.0.1", "[::1]"]


def allowed_hosts(host: str) -> list[str] | None:
    """The Host header names to accept when bound to `host`: that name (and the loopback
    names, on loopback); None (any) for a wildcard address, which needs a token anyway."""
    try:
        if ipaddress.ip_address(host).is_unspecified:
            return None
    except ValueError:
        pass
    names = [f"[{host}]" if ":" in host else host]
    return names + LOOPBACK_NAMES if is_loopback(host) else names


def ui(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Address to bind; a non-loopback one needs a token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free port).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ZARRLAKE_UI_TOKEN",
            help="Token every request must carry (generated when binding a non-loopback address).",
        ),
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open it in a web browser.")] = False,
) -> None:
    """Serve a read-only web UI: branches, history, commits with chunk maps, array previews.

    Example: zarrlake -r ./demo-repo ui --open
    """
    try:
        import uvicorn

        from zarrlake.ui import create_app
    except ImportError as e:
        raise InvalidInputError(
            f"the web UI needs the 'ui' extra (pip install 'zarrlake[ui]'): {e}"
        ) from None
    if token is not None and len(token) < 16:
        raise usage_error("--token must be at least 16 characters")
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
    repo = options(ctx).open()
    app = create_app(repo, token=token, hosts=allowed_hosts(host))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
    sys.stdout.write(f"zarrlake ui: serving {repo.spec.location} (read-only) at {url}\n")
    if token:
        sys.stdout.write("Every request needs this token (?token=... or Authorization: Bearer).\n")
    sys.stdout.flush()
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def register(app: typer.Typer) -> None:
    """Add `ui` to the command line."""
    app.command(rich_help_panel=PANEL_TOOLS)(ui)
