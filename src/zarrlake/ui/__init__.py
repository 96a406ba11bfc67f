"""A read-only web UI for a repository: history, chunk maps of what changed, array previews.

`create_app(repo, token=None)` gives the ASGI application; `zarrlake ui` serves it."""

from zarrlake.ui.app import create_app

__all__ = ["create_app"]
