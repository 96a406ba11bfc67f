"""The README is a first visit: short, with no references a reader cannot follow, and its
quick start runs as written (tests/test_docs_examples.py lists and runs every example of
the README and of the site; the README's other sections moved to the site)."""

from __future__ import annotations

import re

from tests.helpers.examples import ROOT, code_blocks, run_script, snippet

README = ROOT / "README.md"


def test_the_readme_has_one_python_example_the_quick_start():
    assert [section for section, _ in code_blocks("README.md")] == ["Quick start"]


def test_quick_start_runs_as_written(tmp_path):
    code = snippet("README.md", "Quick start")
    assert len(code.strip().splitlines()) <= 20  # a quick start, not a tutorial
    res = run_script(code, tmp_path)
    # What the block prints: the tagged row (time travel) and the two chunks the fix wrote.
    assert "[0. 1. 2.]" in res.stdout
    assert "'temperature': {" in res.stdout and "(0, 0)" in res.stdout and "(0, 1)" in res.stdout
    assert (tmp_path / "quickstart-repo" / "zarrlake.json").exists()


def test_readme_names_the_setup_commands_and_requirements():
    text = README.read_text()
    top = text[: text.index("## Concepts")]
    for needed in ("make demo", "make test", "Python >= 3.12", "Java 17"):
        assert needed in top, needed


def test_the_quick_start_sets_up_with_exactly_make_demo_and_make_test():
    setup = snippet("README.md", "Quick start", kind="sh")
    assert [line.split("#")[0].strip() for line in setup.splitlines()] == ["make demo", "make test"]
    assert len(code_blocks("README.md", "sh")) == 1


def test_the_readme_is_a_first_visit():
    text = README.read_text()
    assert len(text.encode()) <= 15_000 and len(text.splitlines()) <= 250
    for needed in ("## Features", "## Performance", "## Architecture", "docs/concepts.md"):
        assert needed in text, needed


def test_the_readme_names_no_issue_and_links_only_inside_the_repository():
    text = README.read_text()
    assert not re.search(r"\bissues? \d", text, re.I)
    assert "../" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://")):
            continue
        assert (ROOT / target).exists(), target


def diagram_layers(page: str) -> list[str]:
    """The first column of the layer diagram (the first ``` block under Architecture)."""
    (diagram, *_) = [code for section, code in code_blocks(page, "") if section == "Architecture"]
    layers = []
    for line in diagram.splitlines():
        names = re.split(r"\s{2,}", line.strip())[0]
        layers.append(
            " | ".join(n.strip().removesuffix("/").removesuffix(".py") for n in names.split("|"))
        )
    return layers


def test_the_architecture_diagram_is_the_layers_make_lint_checks():
    config = (ROOT / ".importlinter").read_text()
    block = config[config.index("layers =") + len("layers =") :].split("\n\n")[0]
    layers = [
        " | ".join(p.strip() for p in line.split("|")) for line in block.split("\n") if line.strip()
    ]
    assert diagram_layers("README.md") == layers
    assert diagram_layers("docs/architecture.md") == layers
