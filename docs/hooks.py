"""MkDocs hook: the command-line reference, generated from the CLI itself by typer's own
documentation generator (what `typer zarrlake.cli utils docs` prints), in place of the
marker on cli.md."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- zarrlake-cli-reference -->"


def cli_reference() -> str:
    """Markdown for every `zarrlake` command: usage, arguments, options, subcommands."""
    import typer
    from typer.cli import get_docs_for_click

    from zarrlake.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    return get_docs_for_click(obj=command, ctx=ctx, name="zarrlake", indent=2).strip() + "\n"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())
