"""The command line's grammar: choices are checked by the parser (a bad value is a usage
error, exit 2, naming the valid ones), usage lines render their arguments once, a ref is
the first argument (blame and cat too), coordinates take commas or spaces, durations run
from seconds to weeks, lists are subcommands (virtual sources, branch protections), each
old form still works with a one-line notice, and `--help` groups the commands in panels."""

from __future__ import annotations

import re
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok, run
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
    assert usage("virtual", "import") == "Usage: zarrlake virtual import [OPTIONS] {URL}..."
    assert usage("cat") == "Usage: zarrlake cat [OPTIONS] [REF] {ARRAY}"
    assert usage("blame") == "Usage: zarrlake blame [OPTIONS] [REF] {ARRAY} {COORD}..."
    assert usage("branch", "protect") == "Usage: zarrlake branch protect [OPTIONS] {PATTERN}"
    words = (("sessions", "abandon"), ("virtual", "import"), ("cat",), ("blame",))
    for w in words:
        assert not re.search(r"\[\[|\{[A-Z]+\.\.\.\}", usage(*w)), w


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


def test_the_ref_comes_first_and_is_explained_once():
    """REF is the first positional argument of every command that reads at a ref (before
    the array or path where there is one), with one help text that says what a ref may be."""
    from zarrlake.cli.context import REF_HELP

    command = build_command()
    for name in ("ls", "log", "show", "stats", "fsck"):
        arguments = [p for p in command.commands[name].params if p.param_type_name == "argument"]
        assert arguments[0].name == "ref", (name, arguments)
        assert usage(name).startswith(f"Usage: zarrlake {name} [OPTIONS] [REF]"), name
    for name in ("ls", "log", "show", "stats"):
        (ref,) = [p for p in command.commands[name].params if p.name == "ref"]
        assert ref.metavar == "REF" and ref.help == REF_HELP, name
    for name in ("cat", "blame"):
        assert usage(name).startswith(f"Usage: zarrlake {name} [OPTIONS] [REF] {{ARRAY}}")
        (first,) = [p for p in command.commands[name].params if p.param_type_name == "argument"][:1]
        assert REF_HELP in first.help, name
    assert [p.hidden for p in command.commands["blame"].params if p.name == "ref_option"] == [
        True
    ]  # the old --ref still works (deprecated), but help no longer offers it
    assert "ref expression" in REF_HELP


@pytest.fixture
def tagged(tmp_path) -> tuple[zl.Repo, str]:
    """Array t (4 x 6 in 2 x 3 chunks): tag v1 wrote every chunk, then main rewrote chunk
    (1, 0)."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    arr = zarr.open_group(s.store).create_array("t", shape=(4, 6), chunks=(2, 3), dtype="i4")
    arr[:] = np.arange(24).reshape(4, 6)
    s.commit("write t")
    repo.create_tag("v1", at="main")
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[2:4, 0:3] = -1
    s.commit("rewrite chunk 1,0")
    yield repo, str(repo.spec.location)
    repo.close()


def test_blame_takes_the_ref_first_and_coordinates_with_commas_or_spaces(tagged):
    repo, r = tagged
    head, v1 = repo.resolve("main"), repo.resolve("v1")
    for words in (("t", "1,0"), ("t", "1", "0"), ("main", "t", "1,0"), ("main", "t", "1", "0")):
        got = ok("-r", r, "blame", *words, "--json").json()
        assert got["commit"]["id"] == head and got["chunk"] == [1, 0], words
    for words in (("v1", "t", "1,0"), (v1[:10], "t", "1", "0"), ("main~1", "t", "1,0")):
        assert ok("-r", r, "blame", *words, "--json").json()["commit"]["id"] == v1, words
    assert ok("-r", r, "blame", "t", "0,1", "--json").json()["commit"]["id"] == v1
    assert "t chunk (1,0): " in ok("-r", r, "blame", "main", "t", "1,0").stdout


def test_cat_and_show_default_to_main_like_ls_and_log(tagged):
    repo, r = tagged
    expected = np.arange(24).reshape(4, 6)
    expected[2:4, 0:3] = -1
    for words in (("t",), ("main", "t")):
        got = ok("-r", r, "cat", *words, "--slice", "0:4,0:6", "--json").json()
        assert got["values"] == expected.tolist() and got["ref"] == "main", words
    old = ok("-r", r, "cat", "v1", "t", "--slice", "2,0", "--json").json()["values"]
    assert old == 12
    assert ok("-r", r, "show", "--json").json() == ok("-r", r, "show", "main", "--json").json()
    assert ok("-r", r, "show", "--json").json()["commit"]["id"] == repo.resolve("main")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("7d", 7 * 86400), ("1w", 7 * 86400),
     ("1d12h", 129600), ("0s", 0), ("1.5h", 5400)],
)  # fmt: skip
def test_durations_take_a_number_and_a_unit_from_seconds_to_weeks(text, seconds):
    from zarrlake.cli.context import duration_text, parse_duration

    assert parse_duration(text) == timedelta(seconds=seconds)
    assert parse_duration(duration_text(parse_duration(text))) == timedelta(seconds=seconds)


def test_gc_and_expire_take_durations_in_weeks(tagged):
    _, r = tagged
    report = ok("-r", r, "gc", "--older-than", "1w", "--dry-run", "--json").json()
    assert report["objects_deleted"] == 0
    assert "garbage younger than 7d" in ok("-r", r, "gc", "--older-than", "1w", "--dry-run").stdout
    assert ok("-r", r, "expire", "--older-than", "1w", "--json").json()["commits_expired"] == 0


def test_virtual_sources_list_add_and_remove_are_subcommands(tmp_path):
    r = str(tmp_path / "repo")
    zl.Repo.create(r).close()
    one, two = (tmp_path / "one").as_uri(), (tmp_path / "two").as_uri()
    assert ok("-r", r, "virtual", "sources", "list", "--json").json() == []
    assert ok("-r", r, "virtual", "sources", "add", one, "--json").json() == [one]
    assert ok("-r", r, "virtual", "sources", "add", two, "--json").json() == [one, two]
    assert ok("-r", r, "virtual", "sources", "--json").json() == [one, two]  # list: the default
    assert ok("-r", r, "virtual", "sources", "remove", one + "/", "--json").json() == [two]
    assert ok("-r", r, "virtual", "sources").stdout.split() == [two]
    line = fails("-r", r, "virtual", "sources", "remove", one)
    assert "is not allowed, so there is nothing to remove" in line and two in line
    assert zl.Repo.open(r).virtual_sources() == [two]


def test_branch_protections_lists_the_rules_and_protect_needs_a_pattern(tagged):
    repo, r = tagged
    assert ok("-r", r, "branch", "protections", "--json").json() == {}
    assert "(no protected branches)" in ok("-r", r, "branch", "protections").stdout
    ok("-r", r, "branch", "protect", "rel/*", "--allow-delete")
    assert ok("-r", r, "branch", "protections", "--json").json() == repo.protected_branches()
    assert "rel/*" in ok("-r", r, "branch", "protections").stdout
    command = build_command()
    assert {"protect", "protections", "unprotect"} <= set(command.commands["branch"].commands)


DEPRECATED = [
    pytest.param(
        ["blame", "t", "1,0", "--ref", "v1", "--json"],
        ["blame", "v1", "t", "1,0", "--json"],
        "'blame ARRAY COORD... --ref REF' is deprecated",
        "use 'zarrlake blame v1 t 1,0'",
        id="blame --ref",
    ),
    pytest.param(
        ["branch", "protect", "--json"],
        ["branch", "protections", "--json"],
        "'branch protect' is deprecated",
        "use 'zarrlake branch protections'",
        id="branch protect without a pattern",
    ),
]


@pytest.mark.parametrize(("old", "new", "says", "instead"), DEPRECATED)
def test_each_old_form_still_works_and_says_once_what_replaces_it(tagged, old, new, says, instead):
    repo, r = tagged
    repo.protect_branch("main")
    before = ok("-r", r, *old)
    after = ok("-r", r, *new)
    assert before.stdout == after.stdout and before.json()  # the same answer
    assert after.stderr == ""
    (line,) = before.stderr.splitlines()
    assert line.startswith("zarrlake: warning: ") and says in line and instead in line
    assert "next release" in line


def test_a_ref_given_twice_to_blame_is_a_usage_error(tagged):
    _, r = tagged
    line = fails("-r", r, "blame", "main", "t", "1,0", "--ref", "v1", code=2)
    assert "give the ref once" in line


def test_renamed_flags_still_work_and_say_once_what_replaces_them(tagged):
    """--into and --branch became --target, --by became --author (the Python API's names)."""
    repo, r = tagged
    repo.create_branch("dev", at="v1")
    s = repo.create_session("dev")
    zarr.open_array(s.store, path="t")[0:2, 3:6] = 7
    s.commit("dev writes chunk 0,1")

    def old_form(*args: str, says: str, instead: str) -> str:
        res = ok("-r", r, *args)
        (line,) = res.stderr.splitlines()
        assert f"'{says}' is deprecated" in line and f"use '{instead}'" in line
        return res.stdout

    old_form("merge", "dev", "--into", "main", "--ff", "never", says="--into", instead="--target")
    t = zarr.open_array(repo.readonly_session().store, path="t")
    assert np.array_equal(t[0:2, 3:6], np.full((2, 3), 7))
    merged = repo.resolve("main")
    old_form("revert", merged, "--branch", "main", says="--branch", instead="--target")
    t = zarr.open_array(repo.readonly_session().store, path="t")
    assert np.array_equal(t[0:2, 3:6], np.arange(24).reshape(4, 6)[0:2, 3:6])
    assert "give --target only" in fails("-r", r, "merge", "dev", "--into", "x", "--target", "y",
                                         code=2)  # fmt: skip
    old_form("pr", "create", "dev", "--into", "main", says="--into", instead="--target")
    old_form("pr", "comment", "1", "ok?", "--by", "carol", says="--by", instead="--author")
    old_form("pr", "approve", "1", "--by", "dave", says="--by", instead="--author")
    assert repo.pull_request(1).approvals == ["dave"]
    assert [c.by for c in repo.pull_request(1).comments] == ["carol"]
    assert "give --author" in fails("-r", r, "pr", "approve", "1", code=2)
    old_form("pr", "close", "1", "--by", "erin", says="--by", instead="--author")
    assert repo.pull_request(1).state == "closed"
