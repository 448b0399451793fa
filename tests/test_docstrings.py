"""Every docstring example (`>>> `) of art_core, the Prefect tasks and flows, and deployments/ runs: a test per module.

    pytest tests/test_docstrings.py
    pytest tests/test_docstrings.py -k art_core.sft

An example that needs what this suite does not start (a served model, an MCP server on a port, a Prefect
deployment, an LLM, a GPU) carries `# doctest: +SKIP` on each of its lines and stays as documentation. A test
fails on a module that does not import, on an example whose output differs, on a `# doctest:` comment that doctest
does not read (one with a quote in it is ignored, and its example runs), on an example doctest cannot reach, and
on an example that leaves a process running. Options are pytest's default (ELLIPSIS), so
`pytest --doctest-modules art_core tasks flows deployments` reads the examples the same way.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import io
import os
import re
from pathlib import Path

import psutil
import pytest

from art_core.processes import watchdog_pid

ROOT = Path(__file__).resolve().parent.parent
# Each folder and the name it imports as (pyproject.toml maps tasks/ and flows/ into art_pipeline).
PACKAGES = {
    "art_core": "art_core",
    "tasks": "art_pipeline.tasks",
    "flows": "art_pipeline.flows",
    "deployments": "deployments",
}
FLAGS = doctest.ELLIPSIS
DIRECTIVE = re.compile(r"#\s*doctest:")
READ_DIRECTIVE = doctest.DocTestParser._OPTION_DIRECTIVE_RE  # the pattern doctest itself reads options with


def _modules() -> dict[str, Path]:
    """{module name: file} for every Python file of the packages."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


MODULES = _modules()


def _written_examples(path: Path) -> list[doctest.Example]:
    """The examples in the file's docstrings, read from its source (no import)."""
    examples = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text and ">>>" in text:
                examples += doctest.DocTestParser().get_examples(text, f"{path}:{getattr(node, 'name', '')}")
    return examples


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The examples show the defaults: no .env of the caller's folder (a relative path is written in tmp_path too),
    # no ART_* variable of the caller's shell.
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("ART_", "USER_SIM_"))]:
        monkeypatch.delenv(key)
    before = _children()
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)  # raises on an unknown option
    unread = [
        f"{t.name}, line {(t.lineno or 0) + e.lineno + 1}: {line.strip()}"
        for t in tests
        for e in t.examples
        for line in e.source.splitlines()
        if DIRECTIVE.search(line) and not READ_DIRECTIVE.search(line)
    ]
    assert not unread, "doctest does not read these `# doctest:` comments (a quote in them?):\n" + "\n".join(unread)
    found = sum(len(t.examples) for t in tests)
    written = len(_written_examples(MODULES[name]))
    assert found == written, f"{written} examples written in {name}, doctest finds {found} (a nested function's?)"
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
    left = _children() - before - {watchdog_pid()}  # the watchdog lives as long as this process, by design
    assert not left, f"the examples of {name} left processes running: {left}"


def test_the_examples_are_found():
    """A walk that found nothing would pass every test above."""
    examples = [e for path in MODULES.values() for e in _written_examples(path)]
    run = [e for e in examples if not e.options.get(doctest.SKIP)]
    assert len(MODULES) > 150 and len(run) > 250, f"{len(MODULES)} modules, {len(run)} examples that run"
