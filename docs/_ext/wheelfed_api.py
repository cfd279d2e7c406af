"""The API reference, generated from the modules themselves.

``.. wheelfed-modules:: shared.model`` expands, at build time, into one section per module of
that package (the package itself first, then its direct modules in name order), each an
``automodule`` with its documented members. A module added to the package appears by itself;
subpackages get their own page, and the build warns (an error under ``-W``) when a package of
WheelFed is on no page, so a new subpackage cannot silently go undocumented.

Modules that must not be imported by a documentation build (Alembic's migration environment,
``__main__`` entry points) are listed in ``conf.py`` (``wheelfed_api_exclude``), each with its
reason. Docstrings that are not valid reStructuredText yet are shown verbatim instead of being
dropped: ``wheelfed_api_verbatim`` names each such object exactly (module, class or function),
so a new formatting mistake anywhere else still fails the ``-W`` build.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: The top-level packages of the repository whose every package must have an API page.
TOP_LEVEL = ("shared", "firmware_bridge", "edge_client", "aggregator")


def _excluded(app: Sphinx, module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in app.config.wheelfed_api_exclude)


def package_modules(app: Sphinx, package: str) -> tuple[list[str], list[str]]:
    """The documented modules of ``package`` (itself first) and its subpackages, without
    importing anything below it (``pkgutil.iter_modules`` reads the folder)."""
    path = importlib.import_module(package).__path__
    modules, subpackages = [package], []
    for info in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        name = f"{package}.{info.name}"
        if _excluded(app, name) or info.name == "__main__":
            continue
        (subpackages if info.ispkg else modules).append(name)
    return modules, subpackages


class WheelFedModules(SphinxDirective):
    """``.. wheelfed-modules:: PACKAGE`` -- one ``automodule`` section per module of PACKAGE."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        package = self.arguments[0]
        modules, subpackages = package_modules(self.env.app, package)
        self.env.app.env.wheelfed_api_packages.add(package)  # type: ignore[attr-defined]
        lines: list[str] = []
        for module in modules:
            if module != package:  # the package's own docstring sits under the page's title
                title = f"``{module}``"
                lines += [title, "-" * len(title), ""]
            lines += [
                f".. automodule:: {module}",
                "   :members:",
                "   :ignore-module-all:",
                "   :show-inheritance:",
                "",
            ]
        if subpackages:
            lines += ["Subpackages", "-----------", ""]
            lines += [f"* :doc:`{name}`" for name in subpackages] + [""]
        return self.parse_text_to_nodes("\n".join(lines), allow_section_headings=True)


class WheelFedMessageTypes(SphinxDirective):
    """``.. wheelfed-message-types::`` -- a table of every registered message type (its wire
    name, body class and module), read from ``shared.protocol.envelope``'s registry at build
    time, so a new algorithm's messages are listed as soon as its module registers them."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        import shared.protocol.messages as messages
        from shared.protocol.envelope import registered_message_types

        for info in pkgutil.iter_modules(messages.__path__):
            importlib.import_module(f"{messages.__name__}.{info.name}")
        # Message types registered outside the messages package: the chunk wrapper, and the
        # aggregator's own (a site's pre-summed replies, a merge worker's partials and forwarded
        # chunks). Imported here so that the table never depends on what autodoc read first.
        for module in MESSAGE_MODULES:
            importlib.import_module(module)
        rows = sorted(registered_message_types().items(), key=lambda item: (item[1].__module__, item[0]))
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 25 30 45",
            "",
            "   * - ``type``",
            "     - body",
            "     - module",
        ]
        for name, cls in rows:
            lines += [
                f"   * - ``{name}``",
                f"     - :py:class:`~{cls.__module__}.{cls.__qualname__}`",
                f"     - :py:mod:`{cls.__module__}`",
            ]
        return self.parse_text_to_nodes("\n".join(lines))


#: Modules outside ``shared.protocol.messages`` that register message types.
MESSAGE_MODULES = ("shared.protocol.chunking", "aggregator.site_aggregator", "aggregator.merge_workers")


class WheelFedSettings(SphinxDirective):
    """``.. wheelfed-settings:: aggregator.algorithms.FedSCSXGB`` -- the fields of a settings
    dataclass with their types and defaults, read from the class at build time (so a page never
    shows a stale default)."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        import dataclasses

        module_name, _, class_name = self.arguments[0].rpartition(".")
        cls = getattr(importlib.import_module(module_name), class_name)
        lines = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 25 40 35",
            "",
            "   * - parameter",
            "     - type",
            "     - default",
        ]
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            if field.default is not dataclasses.MISSING:
                default = f"``{field.default!r}``"
            elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f"``{field.default_factory()!r}``"  # type: ignore[misc]
            else:
                default = "(required)"
            kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", repr(field.type))
            lines += [f"   * - ``{field.name}``", f"     - ``{kind}``", f"     - {default}"]
        return self.parse_text_to_nodes("\n".join(lines))


def _init_packages(app: Sphinx, env, docnames) -> None:  # noqa: ANN001 - Sphinx's signature
    if not hasattr(env, "wheelfed_api_packages"):
        env.wheelfed_api_packages = set()


def _merge(app: Sphinx, env, docnames, other) -> None:  # noqa: ANN001
    env.wheelfed_api_packages |= getattr(other, "wheelfed_api_packages", set())


def _check_coverage(app: Sphinx, env) -> None:  # noqa: ANN001
    """Warn for every WheelFed package that no API page lists."""
    documented = env.wheelfed_api_packages
    pending = list(TOP_LEVEL)
    while pending:
        package = pending.pop()
        if package not in documented:
            logger.warning(
                "API reference: package %s is on no page (add docs/api/%s.rst with "
                "'.. wheelfed-modules:: %s', or exclude it in conf.py)",
                package,
                package,
                package,
            )
            continue
        pending += package_modules(app, package)[1]


def _verbatim(app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]) -> None:
    """Show the docstring of an object named in ``wheelfed_api_verbatim`` as a literal block."""
    if name in app.config.wheelfed_api_verbatim and lines:
        lines[:] = ["::", ""] + [f"   {line}" if line else "" for line in lines] + [""]


def _module_of(name: str) -> str:
    """The longest imported module that ``name`` (an object's dotted name) lies in."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in sys.modules:
            return ".".join(parts[:end])
    return parts[0]


def _examples_in_module(app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]) -> None:
    """Run a docstring's ``>>>`` examples in its module's namespace, as ``doctest.testmod`` and
    ``pytest --doctest-modules`` do: every run of example lines becomes a ``doctest`` block of
    the module's own group, whose set-up imports the module's globals. (Plain doctest blocks
    would all run in one namespace per page, without the module's names.)"""
    if name in app.config.wheelfed_api_verbatim or not any(line.lstrip().startswith(">>>") for line in lines):
        return
    group = _module_of(name)
    setup_code = f"globals().update(vars(__import__('importlib').import_module({group!r})))"
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                block.append(lines[i][len(indent) :])
                i += 1
            out += ["", f"{indent}.. doctest:: {group}", ""] + [f"{indent}   {b}" for b in block] + [""]
            continue
        out.append(line)
        i += 1
    lines[:] = out + ["", f".. testsetup:: {group}", "", f"   {setup_code}", ""]


# A Markdown link to a page: ``](path.md#anchor)`` or ``.rst`` (the path without its anchor in group 2).
_MARKDOWN_LINK = re.compile(r"(\]\(\s*<?)([^)\s>#]+\.(?:md|rst))(#[^)\s>]*)?")


def site_link(app: Sphinx, target: str, written_in: Path, docname: str) -> str | None:
    """The link, from page ``docname``, to the site page that shows repository file ``target``
    (a path relative to ``written_in``, the file the link is written in), or None when the
    target is neither a page of the site nor a repository file the site includes.

    The pages link to the repository's files as they lie in the repository (``../SCALING.md``,
    ``../../deploy/README.md#...``), so that the links also work when the Markdown is read
    there; Sphinx knows only the pages under ``docs/``, and ``wheelfed_site_pages`` says which
    page includes which file."""
    srcdir = Path(app.srcdir).resolve()
    path = (written_in.parent / target).resolve()
    if path.is_relative_to(srcdir):
        page = path
    else:
        name = app.config.wheelfed_site_pages.get(
            path.relative_to(srcdir.parent).as_posix() if path.is_relative_to(srcdir.parent) else ""
        )
        if name is None:
            return None
        page = srcdir / f"{name}.md"
    return Path(os.path.relpath(page, (srcdir / docname).parent)).as_posix()


def _rewrite_links(app: Sphinx, text: str, written_in: Path, docname: str) -> str:
    def replace(match: re.Match[str]) -> str:
        link = site_link(app, match.group(2), written_in, docname)
        return match.group(0) if link is None else f"{match.group(1)}{link}{match.group(3) or ''}"

    return _MARKDOWN_LINK.sub(replace, text)


def _page_links(app: Sphinx, docname: str, source: list[str]) -> None:
    """``source-read``: a page's links to repository files the site includes go to their pages."""
    source[0] = _rewrite_links(app, source[0], Path(app.env.doc2path(docname)), docname)


def _included_links(app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    """``include-read``: an included file's links (relative to where the file lies) go to the
    pages of the site, relative to the page that includes it."""
    content[0] = _rewrite_links(app, content[0], Path(app.srcdir) / relative_path, app.env.docname)


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("wheelfed_api_exclude", {}, "env")
    app.add_config_value("wheelfed_api_verbatim", {}, "env")
    app.add_config_value("wheelfed_site_pages", {}, "env")
    app.add_directive("wheelfed-modules", WheelFedModules)
    app.add_directive("wheelfed-message-types", WheelFedMessageTypes)
    app.add_directive("wheelfed-settings", WheelFedSettings)
    app.connect("autodoc-process-docstring", _verbatim, priority=600)
    app.connect("autodoc-process-docstring", _examples_in_module, priority=700)
    app.connect("source-read", _page_links)
    app.connect("include-read", _included_links)
    app.connect("env-before-read-docs", _init_packages)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_coverage)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
