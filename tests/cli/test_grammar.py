"""The command line's grammar: choices are checked by the parser (a bad value is a usage
error, exit 2, naming the valid ones), usage lines render their arguments once, the
virtual-chunk verbs are one group, and `--help` groups the commands in panels."""

from __future__ import annotations

import re

import zarrlake as zl
from tests.helpers.cli import run
from zarrlake.cli import build_command
from zarrlake.cli.context import PANELS


def test_a_bad_merge_choice_is_a_usage_error_naming_the_choices(tmp_path):
    zl.Repo.create(tmp_path / "r").close()
    for option, value, choices in (
        ("--on-conflict", "mine", "'fail', 'ours', 'theirs'"),
        ("--ff", "sometimes", "'allow', 'never', 'only'"),
    ):
        res = run("-r", tmp_path / "r", "merge", "main", option, value)
        assert res.code == 2, res.stderr
        assert res.stderr.startswith("zarrlake: error: ") and choices in res.stderr, res.stderr


def usage(*words: str) -> str:
    res = run(*words, "--help")
    assert res.code == 0, res.stderr
    (line,) = [line for line in res.stdout.splitlines() if "Usage:" in line]
    return " ".join(line.split())


def test_usage_lines_bracket_each_argument_once():
    assert usage("sessions", "abandon") == "Usage: zarrlake sessions abandon [OPTIONS] [ID]"
    assert usage("virtual", "sources") == "Usage: zarrlake virtual sources [OPTIONS] [add] [prefix]"
    assert usage("virtual", "import") == "Usage: zarrlake virtual import [OPTIONS] {URL}..."
    for words in (("sessions", "abandon"), ("virtual", "sources"), ("virtual", "import")):
        assert not re.search(r"\[\[|\{[A-Z]+\.\.\.\}", usage(*words)), words


def test_the_virtual_verbs_are_one_group_with_hidden_top_level_aliases():
    command = build_command()
    assert set(command.commands["virtual"].commands) == {"sources", "import", "materialize"}
    for alias in ("import-virtual", "materialize"):
        assert command.commands[alias].hidden, alias
    listed = run("--help").stdout
    assert "import-virtual" not in listed and "virtual" in listed


def test_help_groups_every_command_in_a_panel_in_order():
    command = build_command()
    listed = [command.commands[name] for name in command.list_commands(None)]
    panels = [c.rich_help_panel for c in listed if not c.hidden]
    assert None not in panels and set(panels) <= set(PANELS)
    seen = list(dict.fromkeys(panels))  # panels in order of first appearance
    assert seen == [p for p in PANELS if p in seen]
    text = run("--help").stdout
    for panel in seen:
        assert f"─ {panel} ─" in text, panel


def test_the_ref_is_named_and_explained_once_for_cat_ls_log_show_and_blame():
    """REF is the first argument of the reading commands (blame's first arguments name the
    chunk, so there it is --ref), with one help text that says what a ref may be."""
    from zarrlake.cli.context import REF_HELP

    command = build_command()
    for name in ("cat", "ls", "log", "show"):
        params = [p for p in command.commands[name].params if p.name == "ref"]
        (ref,) = params
        assert ref.metavar == "REF" and ref.help == REF_HELP, name
        positional = [
            p.name for p in command.commands[name].params if p.param_type_name == "argument"
        ]
        assert positional[0] == "ref", (name, positional)
        assert usage(name).startswith(f"Usage: zarrlake {name} [OPTIONS] ") and "REF" in usage(name)
    (ref,) = [p for p in command.commands["blame"].params if p.name == "ref"]
    assert ref.opts == ["--ref"] and ref.metavar == "REF" and ref.help == REF_HELP
    assert "ref expression" in REF_HELP
