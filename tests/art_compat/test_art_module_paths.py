"""ART's module paths, not only its names: the imports of ART's 2026 MCP-RL notebook work with `art` changed to
`art_core`, `art.mcp` and `art.utils.logging` resolve as attributes after `import art_core as art`, and every
name art_core.mcp and art_core.utils exported before they became packages is still there. No server."""

from __future__ import annotations

import importlib
import re

import pytest

import art_core as art

# The two lines of art-notebooks examples/mcp-rl/mcp-rl.ipynb (2026-05) that failed (issue 33), and the other
# `art` imports an MCP-RL notebook of ART's makes.
NOTEBOOK_IMPORTS = """
from art.mcp.generate_scenarios import preview_scenarios
from art.utils.logging import info, ok, step, warn, err
from art.mcp import generate_scenarios, MCPResource, MCPTool, GeneratedScenarioCollection
from art.rewards import ruler_score_group
from art.utils import iterate_dataset
"""


def test_the_notebooks_imports_run_with_only_the_package_renamed() -> None:
    ported = re.sub(r"\bfrom art\.", "from art_core.", NOTEBOOK_IMPORTS)
    namespace: dict = {}
    exec(ported, namespace)
    for name in ("preview_scenarios", "info", "ok", "step", "warn", "err", "generate_scenarios", "MCPTool"):
        assert callable(namespace[name]), name


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("art_core.mcp.generate_scenarios", ["generate_scenarios", "preview_scenarios"]),
        ("art_core.mcp.types", ["MCPTool", "MCPResource", "GeneratedScenario", "GeneratedScenarioCollection"]),
        ("art_core.utils.logging", ["info", "ok", "step", "warn", "err", "dim", "_C", "_ts"]),
        # what the single modules exported before they became packages (tasks/mcp.py and the mcp env use these)
        (
            "art_core.mcp",
            [
                "GeneratedScenario",
                "GeneratedScenarioCollection",
                "MCPResource",
                "MCPTool",
                "ScenarioGenerationError",
                "generate_scenarios",
                "read_collection",
                "stored_scenarios",
                "scenarios_key",
                "scenarios_uri",
                "JudgeUsage",
                "preview_scenarios",
            ],
        ),
        (
            "art_core.utils",
            [
                "DatasetBatch",
                "format_message",
                "get_model_step",
                "iterate_dataset",
                "limit_concurrency",
                "log_http_errors",
                "retry",
            ],
        ),
    ],
)
def test_each_module_path_has_arts_names(module: str, names: list[str]) -> None:
    imported = importlib.import_module(module)
    missing = [n for n in names if not hasattr(imported, n)]
    assert not missing, f"{module} lacks {missing}"


def test_the_packages_resolve_as_attributes_of_the_alias() -> None:
    assert callable(art.mcp.generate_scenarios)  # as in ART, the attribute is the function
    assert art.utils.logging.ok is importlib.import_module("art_core.utils.logging").ok


def test_the_logging_helpers_print_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    from art_core.utils.logging import err, info, ok, step, warn

    for helper, text in [(info, "i"), (step, "s"), (ok, "o"), (warn, "w"), (err, "e")]:
        helper(text)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:] for line in lines] == [
        ["INFO", "i"],
        ["STEP", "s"],
        ["OK", "o"],
        ["WARN", "w"],
        ["ERR", "e"],
    ]
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines)  # a file or pipe gets no ANSI codes


def test_preview_scenarios_prints_the_first_n_as_arts_does(capsys: pytest.CaptureFixture[str]) -> None:
    from art_core.mcp import GeneratedScenarioCollection
    from art_core.mcp.generate_scenarios import preview_scenarios

    scenarios = [{"task": "Look up order 7.", "difficulty": 2}, {"task": "x" * 130, "difficulty": 5}, {"task": "z"}]
    preview_scenarios(scenarios, n=2)
    first, second = capsys.readouterr().out.splitlines()
    assert first == "   1. Look up order 7.  (difficulty 2/5)"
    assert second.startswith("   2. " + "x" * 120 + "…") and second.endswith("(difficulty 5/5)")
    preview_scenarios(GeneratedScenarioCollection.from_dicts(scenarios[:1]))  # a collection works too
    assert capsys.readouterr().out == "   1. Look up order 7.  (difficulty 2/5)\n"
