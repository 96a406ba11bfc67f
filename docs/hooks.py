"""MkDocs hook: the command-line reference, generated from the CLI itself by typer's own
documentation generator (what `typer zarrlake.cli utils docs` prints), and a table of every
command with the first line of its help, in place of the markers on cli.md."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- zarrlake-cli-reference -->"
SUMMARY = "<!-- zarrlake-cli-summary -->"


def cli_reference() -> str:
    """Markdown for every `zarrlake` command: usage, arguments, options, subcommands."""
    import typer
    from typer.cli import get_docs_for_click

    from zarrlake.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    return get_docs_for_click(obj=command, ctx=ctx, name="zarrlake", indent=2).strip() + "\n"


def _commands(command: Any, prefix: str) -> list[tuple[str, Any]]:
    """(full name, command) of every leaf command under `command`, in help order."""
    subs = getattr(command, "commands", None)
    if not subs:
        return [(prefix, command)]
    out = []
    for name in command.list_commands(None):
        if not subs[name].hidden:  # aliases kept for old scripts are not documented
            out += _commands(subs[name], f"{prefix} {name}")
    return out


def _anchor(name: str) -> str:
    """The id Python-Markdown's toc gives the heading `name` (as in the reference below)."""
    return name.replace(" ", "-")


def cli_summary() -> str:
    """A table: every leaf command, linked to its reference, with its help's first paragraph."""
    import typer

    from zarrlake.cli import app

    rows = ["| command | what it does |", "|---|---|"]
    for name, command in _commands(typer.main.get_command(app), "zarrlake"):
        paragraph = (command.help or "").strip().split("\n\n")[0]
        first = " ".join(paragraph.split()).replace("|", "\\|")
        rows.append(f"| [`{name}`](#{_anchor(name)}) | {first} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if SUMMARY in markdown:
        markdown = markdown.replace(SUMMARY, cli_summary())
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    return markdown
