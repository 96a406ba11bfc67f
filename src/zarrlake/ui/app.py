"""The ASGI application: routes, HTML/JSON rendering, errors as 4xx pages, and the token
check for servers reachable from other machines."""

from __future__ import annotations

import functools
import json
import logging
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from zarrlake.errors import (
    InvalidInputError,
    NotFoundError,
    StaleVirtualChunkError,
    UndecodableChunkError,
    ZarrLakeError,
)
from zarrlake.present import short, subject
from zarrlake.repo import Repo
from zarrlake.ui.model import Model
from zarrlake.ui.pulls import PullPages
from zarrlake.ui.routes import Pages

log = logging.getLogger("zarrlake.ui")
TOKEN_COOKIE = "zarrlake_ui_token"
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; form-action 'self'"
    ),
}


def jsonable(value: Any) -> Any:
    """Plain JSON: NaN and infinities (fill values) become strings, tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, complex):
        return [jsonable(value.real), jsonable(value.imag)]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return jsonable(value.item())
    if isinstance(value, bytes):
        return value.hex()
    return value


def status_of(exc: Exception) -> int:
    """The HTTP status for an error: 404 not found, 400 bad input, 409 stored data that
    cannot be shown (a virtual chunk's source no longer holds what was imported, chunk
    bytes the array's codecs cannot decode), else 500."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, StaleVirtualChunkError | UndecodableChunkError):
        return 409
    if isinstance(exc, InvalidInputError | ValueError | IndexError | KeyError):
        return 400
    return 500


class TokenMiddleware(BaseHTTPMiddleware):
    """Every request needs the token: `Authorization: Bearer T`, `?token=T` (which also
    sets a cookie so that the page's links and images work) or that cookie."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    def _ok(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """Answer 401 unless the request carries the token; set the cookie when given by query."""
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        query = request.query_params.get("token")
        if not (self._ok(bearer) or self._ok(query) or self._ok(request.cookies.get(TOKEN_COOKIE))):
            return PlainTextResponse(
                "401 Unauthorized: this server needs its token (?token=... once, or an "
                "'Authorization: Bearer ...' header)",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer", **SECURITY_HEADERS},
            )
        response = await call_next(request)
        if self._ok(query):
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
        return response


def create_app(repo: Repo, token: str | None = None, hosts: list[str] | None = None) -> Starlette:
    """The read-only web UI for `repo`; with `token`, every request must carry it. With
    `hosts`, a request whose Host header names another host gets a 400: a web page that
    rebinds its own name to this address (DNS rebinding) cannot read the repository."""
    templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
    env = templates.env
    env.globals["url"] = url
    env.filters["short"] = short
    env.filters["tojson_pretty"] = lambda v: json.dumps(jsonable(v), indent=2)
    env.filters["bytes"] = _human_bytes
    env.filters["num"] = lambda v: "-" if v is None else f"{v:.6g}"
    env.filters["subject"] = subject
    env.filters["when"] = lambda t: (t or "-")[:19].replace("T", " ")

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/") or request.query_params.get("format") == "json"

    def render(request: Request, template: str, data: dict) -> Response:
        if wants_json(request):
            return JSONResponse(jsonable(data), headers=SECURITY_HEADERS)
        return templates.TemplateResponse(
            request, template, {"data": data, "repo": repo.spec.location}, headers=SECURITY_HEADERS
        )

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        @functools.wraps(handler)
        def run(request: Request) -> Response:
            try:
                return handler(request)
            except (ZarrLakeError, ValueError, IndexError, KeyError) as exc:
                status = status_of(exc)
                message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
                if status == 500:
                    log.exception("error in %s", request.url.path)
                    message = f"internal error: {type(exc).__name__}: {message}"
                if wants_json(request):
                    body = {"error": message, "status": status}
                    return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)
                context = {"data": {"error": message, "status": status}, "repo": repo.spec.location}
                return templates.TemplateResponse(
                    request, "error.html", context, status_code=status, headers=SECURITY_HEADERS
                )

        return run

    pages = Pages(Model(repo), render)
    pulls = PullPages(pages)
    table = [
        ("/", pages.home),
        ("/log", pages.log),
        ("/commit/{ref:path}", pages.commit),
        ("/diff", pages.diff),
        ("/chunkmap", pages.chunk_map),
        ("/tree", pages.tree),
        ("/array", pages.array),
        ("/pulls", pulls.pulls),
        ("/pull/{id}", pulls.pull),
    ]
    routes = [Route(p, guarded(h), methods=["GET"]) for p, h in table]
    routes += [
        Route("/api" + (p if p != "/" else "/home"), guarded(h), methods=["GET"]) for p, h in table
    ]
    routes += [
        Route("/preview.png", guarded(pages.preview_png), methods=["GET"]),
        Route("/colorbar.png", guarded(pages.colorbar_png), methods=["GET"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []
    if token:
        middleware.append(Middleware(TokenMiddleware, token=token))
    return Starlette(routes=routes, middleware=middleware)


def url(route: str, /, **query: Any) -> str:
    """A link with its query string; empty parameters are left out."""
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return route + ("?" + urlencode(q) if q else "")


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)
