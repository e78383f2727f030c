"""The front door and the documentation site: a short README that reaches the user's own data early and
links into docs/, a navigation that holds every page, figures that are the measured ones, and a strict
site build in the test command."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"


def nav_pages(entries: list) -> set[str]:
    pages: set[str] = set()
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; depth goes to docs/"
    own_data = next(i for i, line in enumerate(lines, 1) if re.match(r"^#+ .*your own data", line, flags=re.I))
    assert own_data <= 80, f"'your own data' starts at line {own_data}"


def test_readme_links_into_docs_resolve() -> None:
    links = re.findall(r"\]\((docs/[^)#\s]+)", README.read_text(encoding="utf-8"))
    assert len(links) >= 10
    for link in links:
        assert (REPO / link).is_file(), f"README links to {link}, which does not exist"


def test_readme_headline_figures_are_on_the_pages_they_cite() -> None:
    rows = [line for line in README.read_text(encoding="utf-8").splitlines() if "](docs/results/" in line]
    assert len(rows) >= 5
    for row in rows:
        page = re.search(r"\]\((docs/results/[^)#]+)", row).group(1)
        text = (REPO / page).read_text(encoding="utf-8")
        for figure in re.findall(r"\b0\.\d{4}\b", row):
            assert figure in text, f"{figure} (README) is not on {page}"


def test_every_page_is_in_the_navigation() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks_generate", DOCS / "hooks" / "generate.py")
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    GENERATED, OPTIONAL_PAGES = hooks.GENERATED, hooks.OPTIONAL_PAGES  # noqa: N806 - the hook's names
    nav = nav_pages(config()["nav"])
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert written - set(OPTIONAL_PAGES) <= nav, f"pages not in mkdocs.yml's nav: {written - nav}"
    for page in nav:
        assert page in written or page in GENERATED, f"nav names {page}, which is neither written nor generated"


def test_the_test_command_builds_the_site_strictly() -> None:
    assert config()["strict"] is True
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    lint, build, tests = (
        script.index(s) for s in ('lint-imports"', "-m mkdocs build --strict", '-m pytest "${args[@]}" "$@"')
    )
    assert lint < build < tests
    # and pytest reports what the suite covers and where its time goes (docs/contributing.md)
    assert "--cov --cov-report=term" in script and "coverage_by_package.py" in script and "--dist loadscope" in script
    assert "--durations=10" in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    install = (REPO / "scripts" / "install.sh").read_text(encoding="utf-8")
    assert 'extras="serve,train,encoder,encoder-export,test,cluster,docs"' in install


def ssi_commands(text: str) -> list[str]:
    """Every `ssi ...` line of the fenced blocks of a markdown text, continuation lines joined, comments cut."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ")
            if line.startswith("ssi "):
                found.append(line)
    return found


def test_commands_in_readme_and_docs_are_real() -> None:
    """Each `ssi SUB [SUBSUB] --flag` shown (the commands beside the figures among them) exists today."""
    import typer

    from ssi_cli.main import build_app

    group = typer.main.get_command(build_app())
    commands = [
        (page, line) for page in [README, *DOCS.rglob("*.md")] for line in ssi_commands(page.read_text("utf-8"))
    ]
    assert len(commands) >= 50
    for page, line in commands:
        words = line.split()
        command = group.commands.get(words[1])  # type: ignore[attr-defined]
        assert command is not None, f"{page.name}: `ssi {words[1]}` is not a command"
        rest = words[2:]
        if hasattr(command, "commands"):  # a group: `ssi clicks synthetic ...`
            command, rest = command.commands[rest[0]], rest[1:]
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        for word in rest:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"--[a-z][a-z0-9-]*", flag):
                assert flag in known, f"{page.name}: `{line[:80]}` uses {flag}, which `ssi {words[1]}` lacks"
