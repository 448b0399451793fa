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


# Every module path ART's notebooks (art-notebooks, 2026-07), examples and docs import, with the names they take
# from it, as docs/art-compatibility.md's table lists them. Names of services art_core cannot offer are importable
# and raise NotImplementedError saying why when used (UNAVAILABLE below).
MODULE_PATHS = [
    ("art_core", ["TrainableModel", "Model", "Trajectory", "TrajectoryGroup", "gather_trajectory_groups", "dev"]),
    ("art_core.local", ["LocalBackend"]),
    ("art_core.local.backend", ["LocalBackend"]),
    ("art_core.rewards", ["ruler_score_group", "ruler"]),
    ("art_core.mcp", ["generate_scenarios", "MCPTool", "MCPResource", "GeneratedScenarioCollection"]),
    ("art_core.mcp.generate_scenarios", ["generate_scenarios", "preview_scenarios"]),
    ("art_core.mcp.types", ["MCPTool", "MCPResource", "GeneratedScenario", "GeneratedScenarioCollection"]),
    ("art_core.utils", ["iterate_dataset", "limit_concurrency", "retry"]),
    ("art_core.utils.logging", ["info", "ok", "step", "warn", "err"]),
    ("art_core.utils.sft", ["create_sft_dataset_iterator", "train_sft_from_file"]),
    ("art_core.utils.strip_logprobs", ["strip_logprobs"]),
    ("art_core.utils.litellm", ["convert_litellm_choice_to_openai"]),
    ("art_core.utils.deployment", ["deploy_model"]),
    ("art_core.langgraph", ["init_chat_model", "wrap_rollout"]),
    ("art_core.dev", ["InternalModelConfig", "InitArgs", "EngineArgs", "TrainerArgs", "PeftArgs"]),
    ("art_core.pipeline_trainer", ["PipelineTrainer"]),
    ("art_core.types", ["TrainConfig", "TrainSFTConfig", "Messages", "MessagesAndChoices", "Tools"]),
    ("art_core.serverless", ["ServerlessBackend"]),
    ("art_core.serverless.backend", ["ServerlessBackend"]),
    ("art_core.megatron", ["MegatronBackend"]),
    ("art_core.megatron.backend", ["MegatronBackend"]),
    ("art_core.distill", []),
    ("art_core.tinker", []),
    ("art_core.tinker_native", []),
    ("art_core.trainer_rank", []),
    ("art_core.skypilot", []),
    ("art_core.utils.s3", []),
    ("art_core.utils.benchmarking", []),
    ("art_core.utils.benchmarking.charts", []),
    ("art_core.utils.benchmarking.load_trajectories", []),
    ("art_core.utils.benchmarking.types", []),
]
# path -> a name ART users take from it that raises NotImplementedError, and words its message must hold
UNAVAILABLE = {
    "art_core.distill": ("prepare", "MegatronBackend"),
    "art_core.tinker_native": ("TinkerNativeBackend", "Tinker"),
    "art_core.skypilot": ("SkyPilotBackend", "launcher"),
    "art_core.utils.s3": ("pull_model_from_s3", "_experimental_pull_from_s3"),
    "art_core.utils.benchmarking.charts": ("training_progress_chart", "Parquet"),
    "art_core.utils.benchmarking.load_trajectories": ("load_trajectories", "Parquet"),
    "art_core.utils.benchmarking.types": ("BenchmarkModelKey", "Parquet"),
}


@pytest.mark.parametrize(("module", "names"), MODULE_PATHS, ids=[m for m, _ in MODULE_PATHS])
def test_every_module_path_art_users_import_exists(module: str, names: list[str]) -> None:
    imported = importlib.import_module(module)
    missing = [n for n in names if not hasattr(imported, n)]
    assert not missing, f"{module} lacks {missing}"


@pytest.mark.parametrize("module", sorted(UNAVAILABLE))
def test_a_path_that_cannot_be_served_says_why_when_used(module: str) -> None:
    name, why = UNAVAILABLE[module]
    imported = importlib.import_module(module)  # importing works, so a script fails where it uses the name
    with pytest.raises(NotImplementedError, match=why):
        getattr(imported, name)


@pytest.mark.parametrize("cls", ["ServerlessBackend", "MegatronBackend", "TinkerNativeBackend", "SkyPilotBackend"])
def test_backends_of_hosted_or_multi_gpu_services_refuse_on_construction(cls: str) -> None:
    with pytest.raises(NotImplementedError, match="not available"):
        getattr(art, cls)()


def test_strip_logprobs_and_the_litellm_choice_helpers_do_what_arts_notebooks_use_them_for() -> None:
    from art_core.utils.litellm import convert_litellm_choice_to_openai
    from art_core.utils.strip_logprobs import strip_logprobs

    reply = {"choices": [{"message": {"content": "hi"}, "logprobs": {"content": [{"logprob": -0.1}]}}], "n": 1}
    assert strip_logprobs(reply) == {"choices": [{"message": {"content": "hi"}}], "n": 1}
    assert "logprobs" in reply["choices"][0]  # the input is left alone
    choice = convert_litellm_choice_to_openai(
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}],
            },
        }
    )
    assert choice.message.tool_calls[0].function.name == "look" and choice.finish_reason == "tool_calls"


def test_mcp_sdk_tools_of_either_version_become_arts_tool_dicts() -> None:
    import mcp.types

    from art_core.mcp import MCPResource, MCPTool

    sdk_tool = mcp.types.Tool(name="get_user", description="Find a user.", input_schema={"type": "object"})
    assert MCPTool.from_dict(sdk_tool).to_dict() == {
        "name": "get_user",
        "description": "Find a user.",
        "parameters": {"type": "object"},
    }
    assert MCPTool.from_dict({"name": "t", "inputSchema": {"type": "object"}}).parameters == {"type": "object"}
    sdk_resource = mcp.types.Resource(name="policy", uri="x://policy", mime_type="text/plain")
    assert MCPResource.from_dict(sdk_resource).to_dict()["mimeType"] == "text/plain"


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
