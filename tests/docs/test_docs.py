"""The documentation builds without a warning, every example in it runs, and no link is broken.

* ``sphinx-build -W -b html`` and ``-b doctest`` over ``docs/`` (the API reference is generated
  from the modules, so a docstring that is not valid reStructuredText, or an example that does
  not run, fails here);
* every ``{py:...}`` reference in the pages names an object that the build documented (Sphinx
  itself stays silent about unresolved Python references unless nitpicky);
* a link check of ``docs/**/*.md``, README.md and every repository Markdown file the site
  includes (``wheelfed_site_pages`` in ``docs/conf.py``: PRIVACY.md, SCALING.md,
  deploy/README.md, ...), standard library only: every relative link leads to a file of the
  repository, and every ``#anchor`` to a heading of the target Markdown file (GitHub's and MyST's
  heading slugs), so the links work both on the built site and when the files are read in the
  repository. Links to other sites are not fetched;
* the doctest build ran every example: as many as ``doctest.DocTestFinder`` finds in the
  documented objects of the packages, plus those of the pages' ``{doctest}`` blocks, so an
  example that the build skips (a docstring autodoc does not render, a ``+SKIP``) fails.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import runpy
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# ---------------------------------------------------------------------------------------------
# The link checker


_FENCE = re.compile(r"^(`{3,}|~{3,})")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def _prose_lines(text: str, *, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line.lstrip())
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
                continue
            if marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker) :].strip():
                fence = None
                continue
        if fence is None:
            out.append((number, re.sub(r"`+[^`]*`+", "``", line) if blank_code else line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (MyST's ``myst_heading_anchors`` makes the same): the text
    without markup, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"[*_]{1,3}([^*_]+)[*_]{1,3}", r"\1", text)
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (numbered -1, -2, ... when a
    heading repeats, as GitHub does) and MyST's explicit ``(target)=`` labels."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8"), blank_code=False):
        label = re.match(r"^\(([^)\s]+)\)=\s*$", line)
        if label:
            found.add(label.group(1))
            continue
        match = _HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code."""
    found = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for pattern in (_LINK, _IMAGE, _REFERENCE_DEFINITION):
            found += [(number, match.group(1)) for match in pattern.finditer(line)]
    return found


def broken_links(files: list[Path], root: Path) -> list[str]:
    """One line per broken internal link in ``files``: a target outside ``root``, a missing
    file, or an anchor that the target Markdown file does not have."""
    problems = []
    for path in files:
        for number, target in links(path):
            where = f"{path.relative_to(root)}:{number}: {target}"
            if _EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            destination = (path.parent / file_part).resolve() if file_part else path.resolve()
            if not destination.is_relative_to(root.resolve()):
                problems.append(f"{where}: leads outside the repository")
            elif not destination.exists():
                problems.append(f"{where}: no such file")
            elif anchor:
                if destination.suffix != ".md":
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                elif anchor not in anchors(destination):
                    problems.append(f"{where}: {destination.name} has no heading with this anchor")
    return problems


def docs_config() -> dict:
    """The names ``docs/conf.py`` defines (it imports ``shared`` for the version, nothing else)."""
    return runpy.run_path(str(DOCS / "conf.py"))


def markdown_files() -> list[Path]:
    """The pages, README.md and the repository's Markdown files that the site includes."""
    included = [ROOT / path for path in docs_config()["wheelfed_site_pages"]]
    return sorted({ROOT / "README.md", *included, *DOCS.rglob("*.md")})


def test_no_broken_internal_link_in_docs_and_readme() -> None:
    files = markdown_files()
    assert {ROOT / "deploy" / "README.md", ROOT / "SCALING.md", ROOT / "PRIVACY.md"} <= set(files)
    assert len(files) > 10 and sum(len(links(f)) for f in files) > 30, "the checker found too little to check"
    assert broken_links(files, ROOT) == []


def test_every_file_the_site_includes_has_its_page() -> None:
    """``wheelfed_site_pages`` (which the build uses to point links at the pages) says which page
    includes which repository file; each page must include exactly that file."""
    pages = docs_config()["wheelfed_site_pages"]
    assert "deploy/README.md" in pages and "README.md" in pages
    for path, page in pages.items():
        assert (ROOT / path).exists(), path
        source = (DOCS / f"{page}.md").read_text(encoding="utf-8")
        included = re.findall(r"^```\{include\}\s+(\S+)", source, re.M)
        assert [(DOCS / target).resolve() for target in included] == [(ROOT / path).resolve()], page


def test_the_readme_links_only_inside_the_repository_and_to_the_docs() -> None:
    targets = [target for _, target in links(ROOT / "README.md")]
    assert not [t for t in targets if _EXTERNAL.match(t)], "README.md links outside the repository"
    assert any(t.startswith("docs/") for t in targets), "README.md does not lead to docs/"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[gone](missing.md)", "no such file"),
        ("[gone](page.md#no-such-heading)", "has no heading with this anchor"),
        ("[gone](#nowhere)", "has no heading with this anchor"),
        ("[out](../../outside.md)", "leads outside the repository"),
        ("[gone]: missing.md", "no such file"),
        ("![picture](missing.png)", "no such file"),
    ],
)
def test_the_link_checker_finds_broken_links(tmp_path: Path, text: str, problem: str) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "page.md").write_text("# Title\n\n## A `code` heading: yes!\n\n## Repeated\n\n## Repeated\n")
    source = root / "docs" / "index.md"
    source.write_text(f"# Index\n\n{text}\n")
    [found] = broken_links([source], root)
    assert problem in found


def test_the_link_checker_accepts_good_links_and_ignores_code(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "page.md").write_text(
        "# Title\n\n## A `code` heading: yes!\n\n## Repeated\n\n## Repeated\n\n(my-label)=\n## Labelled\n"
    )
    source = root / "docs" / "index.md"
    source.write_text(
        "# Index\n\n[a](page.md) [b](page.md#a-code-heading-yes) [c](page.md#repeated-1) "
        "[d](#index) [e](https://example.org/x) [f](page.md#my-label)\n\n"
        "```console\n[not](a-link.md)\n```\n\nInline `[not](a-link.md)` either.\n"
    )
    assert broken_links([source], root) == []


# ---------------------------------------------------------------------------------------------
# The Sphinx builds


def _sphinx(builder: str, out: Path, doctrees: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            builder,
            "-d",
            str(doctrees),
            str(DOCS),
            str(out / builder),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML build (the doctest build reuses its doctrees, so the pages are read once)."""
    try:
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI must build the docs: install the docs extra (pip install -e '.[docs]')")
        pytest.skip("the docs extra (pip install -e '.[docs]') is not installed")
    out = tmp_path_factory.mktemp("docs")
    result = _sphinx("html", out, out / "doctrees")
    assert result.returncode == 0, f"sphinx-build -W -b html failed:\n{result.stderr[-6000:]}"
    return out


@pytest.mark.slow
def test_html_builds_without_warnings_and_renders_the_diagrams(built: Path) -> None:
    html = built / "html"
    for page in (
        "index",
        "architecture",
        "protocol",
        "guides/operating",
        "guides/research",
        "guides/extending",
        "algorithms/fedscs_xgb",
        "api/aggregator.algorithms",
        "privacy",
    ):
        assert (html / f"{page}.html").exists(), page
    architecture = (html / "architecture.html").read_text(encoding="utf-8")
    rendered = list((html / "_images").glob("graphviz-*.svg"))
    assert len(rendered) >= 3 and architecture.count("graphviz-") >= 3, "the diagrams were not rendered"
    api = (html / "api" / "aggregator.algorithms.html").read_text(encoding="utf-8")
    assert 'id="aggregator.algorithms.fedscs_xgb.FedSCSXGB"' in api, "the API reference lacks FedSCSXGB"


@pytest.mark.slow
def test_every_python_reference_in_the_pages_resolves(built: Path) -> None:
    from sphinx.util.inventory import InventoryFile

    with open(built / "html" / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", lambda base, uri: uri)
    known = (
        {name for kind, objects in inventory.data.items() if kind.startswith("py:") for name in objects}
        if hasattr(inventory, "data")
        else {name for kind, objects in inventory.items() if kind.startswith("py:") for name in objects}
    )
    role = re.compile(r"\{py:(?:class|func|meth|mod|data|attr|exc|obj)\}`~?([^`<]+?)(?:\s*<([^>]+)>)?`")
    missing = []
    for page in DOCS.rglob("*.md"):
        for match in role.finditer(page.read_text(encoding="utf-8")):
            target = (match.group(2) or match.group(1)).strip().lstrip("~")
            if target not in known:
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert len(known) > 500
    assert missing == []


def api_modules(excluded: dict[str, str]) -> list[str]:
    """Every module of the four packages but the excluded ones and ``__main__`` entry points:
    what the API reference documents (walked here, not with the build's own extension)."""
    found, pending = [], ["shared", "firmware_bridge", "edge_client", "aggregator"]
    while pending:
        package = pending.pop()
        found.append(package)
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            name = f"{package}.{info.name}"
            if info.name == "__main__" or any(name == e or name.startswith(e + ".") for e in excluded):
                continue
            (pending if info.ispkg else found).append(name)
    return found


def expected_examples() -> dict[str, int]:
    """Examples per source, counted as ``doctest`` counts them (one per ``>>>`` statement): the
    docstrings of every public object of every documented module (``doctest.DocTestFinder``,
    which like autodoc takes only what the module itself defines), and the pages' ``{doctest}``
    blocks."""
    config = docs_config()
    counts: dict[str, int] = {}
    finder = doctest.DocTestFinder(exclude_empty=True)
    for name in api_modules(config["wheelfed_api_exclude"]):
        for test in finder.find(importlib.import_module(name), name):
            own = test.name[len(name) :].split(".")
            if (
                test.examples
                and test.name not in config["wheelfed_api_verbatim"]
                and not any(part.startswith("_") for part in own)
            ):
                counts[test.name] = len(test.examples)
    parser = doctest.DocTestParser()
    for page in sorted(DOCS.rglob("*.md")):
        for block in re.findall(r"^```\{doctest\}[^\n]*\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S):
            key = str(page.relative_to(ROOT))
            counts[key] = counts.get(key, 0) + len(parser.get_examples(block))
    return counts


@pytest.mark.slow
def test_every_example_runs(built: Path) -> None:
    result = _sphinx("doctest", built, built / "doctrees")
    report = (
        (built / "doctest" / "output.txt").read_text(encoding="utf-8")
        if (built / "doctest" / "output.txt").exists()
        else ""
    )
    assert result.returncode == 0, f"sphinx-build -b doctest failed:\n{report[-6000:]}\n{result.stderr[-3000:]}"
    assert re.search(r"^\s*0 failures in tests$", report, re.M), report[-3000:]
    ran = re.search(r"^\s*(\d+) tests?$", report, re.M)
    expected = expected_examples()
    assert sum(expected.values()) >= 200 and any(key.startswith("docs/") for key in expected)
    # Per module too, so that a failure names where the examples went missing.
    ran_per_group: dict[str, int] = {}
    for n, group in re.findall(r"^\s*(\d+) tests? in (\S+)$", report, re.M):
        if group != "default":
            ran_per_group[group] = ran_per_group.get(group, 0) + int(n)
    per_module: dict[str, int] = {}
    for name, count in expected.items():
        if not name.startswith("docs/"):
            module = max((m for m in ran_per_group if name == m or name.startswith(m + ".")), key=len, default=name)
            per_module[module] = per_module.get(module, 0) + count
    missing = {m: (n, ran_per_group.get(m, 0)) for m, n in per_module.items() if ran_per_group.get(m, 0) != n}
    assert ran and int(ran.group(1)) == sum(expected.values()), (
        f"the doctest build ran {ran and ran.group(1)} examples, the sources hold {sum(expected.values())}; "
        f"(expected, ran) per module where they differ: {missing}"
    )


def test_every_test_and_file_the_pages_name_exists() -> None:
    """The pages cite oracles by test name and point at scripts and folders by path; a rename
    must not leave them citing something that is gone."""
    tests_source = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").rglob("test_*.py"))
    defined = set(re.findall(r"^\s*def (test_\w+)\(", tests_source, re.M))
    path_like = re.compile(
        r"`((?:tests|benchmarks|deploy|aggregator|edge_client|shared|firmware_bridge)/[\w./-]*?)"
        r"(?:::(\w+))?`"
    )
    missing = []
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        for name in re.findall(r"`(test_\w+)`", text):
            if name not in defined:
                missing.append(f"{page.relative_to(ROOT)}: {name}")
        for path, name in path_like.findall(text):
            if re.search(r"[A-Z]{2,}", path):  # a placeholder: shared/protocol/messages/NAME.py
                continue
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
            elif name and name not in (ROOT / path).read_text(encoding="utf-8"):
                missing.append(f"{page.relative_to(ROOT)}: {path}::{name}")
    assert sum(1 for page in DOCS.rglob("*.md") for _ in re.finditer(r"`test_\w+`", page.read_text())) > 10
    assert missing == []
