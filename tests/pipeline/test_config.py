"""A bad RunConfig is refused before any work, with a message that names the field to fix: by pydantic for what
the fields say by themselves, by flows.preflight for what needs the disk, an import or a server."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from art_pipeline.flows.config import RunConfig
from art_pipeline.flows.preflight import PreflightError, preflight


def _base(tiny_model_path, tmp_path, **update):
    cfg = {
        "project": "demo",
        "model": "agent-001",
        "base_model": str(tiny_model_path),
        "environment": {"name": "tic-tac-toe"},
        "storage_url": str(tmp_path / "art"),
    }
    cfg.update(update)
    return cfg


@pytest.mark.parametrize(
    ("update", "field", "hint"),
    [
        ({"group_size": 1}, "group_size", "greater than or equal to 2"),
        ({"steps": 0}, "steps", "greater than or equal to 1"),
        ({"environment": {"name": "chess-9000"}}, "environment.name", "unknown environment"),
        (
            {"environment": {"name": "tic-tac-toe", "options": {"constrain_move": True}}},
            "environment",
            "constrain_move",
        ),
        ({"model": "../escape"}, "model", "not allowed"),
        ({"base_model": "/nonexistent/model"}, "base_model", "no config.json"),
        ({"train": {"learning_rate": -1}}, "train.learning_rate", "greater than 0"),
        ({"storage_url": "ftp://host/x"}, "storage_url", "unsupported scheme"),
        ({"judge": {"model": "openai/o4-mini", "api_key": "sk-secret"}}, "judge.api_key", "Extra inputs"),
        ({"judge": {"model": "m", "litellm_params": {"api_key": "sk-1"}}}, "judge.litellm_params", "secrets"),
        ({"group_sise": 8}, "group_sise", "Extra inputs"),
        ({"inference_url": "127.0.0.1:8000"}, "inference_url", "http://"),
        (
            {"environment": {"name": "tic-tac-toe", "options": {"constrain_moves": True}}},
            "train.old_logprobs",
            "after the grammar mask",
        ),
        (
            {"environment": {"name": "retail", "options": {"force_tool_calls": True}}},
            "train.old_logprobs",
            "constrains sampling",
        ),
    ],
)
def test_invalid_field_is_named(tiny_model_path, tmp_path, update, field, hint):
    with pytest.raises((ValidationError, PreflightError)) as e:
        preflight(RunConfig(**_base(tiny_model_path, tmp_path, **update)))
    text = str(e.value)
    assert field in text and hint in text, text


def test_building_a_config_reads_nothing_and_preflight_checks_it(tiny_model_path, tmp_path):
    """A config is built without I/O (from the form, from a stored result): a missing model folder or an option
    the environment refuses waits for preflight, which names the field; preflight resolves what it checked."""
    missing = RunConfig(**_base(tiny_model_path, tmp_path, base_model="./no/such/model"))
    assert missing.base_model == "./no/such/model"
    with pytest.raises(PreflightError, match="no config.json") as e:
        preflight(missing)
    assert e.value.field == "base_model"
    refused = RunConfig(**_base(tiny_model_path, tmp_path, environment={"name": "retail", "options": {"sede": 1}}))
    with pytest.raises(PreflightError, match="sede") as e:
        preflight(refused)
    assert e.value.field == "environment"

    checked = preflight(RunConfig(**_base(tiny_model_path, tmp_path, base_model=os.path.relpath(tiny_model_path))))
    assert checked.base_model == str(tiny_model_path) and checked.sampling.max_tokens == 256
    assert preflight(checked) is checked  # once per config


def test_defaults_and_paths_resolved(tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = preflight(RunConfig(**_base(tiny_model_path, tmp_path, storage_url="./runs")))
    assert cfg.storage_url == str(tmp_path / "runs")  # a worker in another folder gets the same place
    assert os.path.isabs(cfg.base_model)
    assert cfg.group_size >= 2 and cfg.judge is None


def test_flow_refuses_bad_config_before_any_work(prefect_api, tiny_model_path, tmp_path):
    """Called as Prefect calls it (parameters as JSON), the flow fails on validation and writes nothing."""
    from art_pipeline.flows.train import train

    storage = tmp_path / "art"
    with pytest.raises(Exception) as e:
        train(config=_base(tiny_model_path, tmp_path, group_size=1))
    assert "group_size" in str(e.value)
    assert not storage.exists(), "the refused run must not touch storage"
    with pytest.raises(PreflightError, match="base_model: .*no config.json"):  # refused by preflight, as early
        train(config=_base(tiny_model_path, tmp_path, base_model=str(tmp_path / "nowhere")))
    assert not storage.exists(), "the refused run must not touch storage"


def test_eval_every_larger_than_steps_means_evaluate_after_the_last_step(tiny_model_path, tmp_path):
    """The UI's defaults (steps 3, eval_every 3) with steps lowered to 2 is a valid run: it evaluates at its end."""
    cfg = RunConfig(**_base(tiny_model_path, tmp_path, steps=2, eval_every=3))
    assert cfg.eval_every == 3 and cfg.steps == 2


def test_one_judge_config_for_the_run_the_task_and_ruler():
    from art_core.rewards import JudgeConfig as LibraryJudge
    from art_core.rewards.ruler import RulerConfig
    from art_pipeline.flows.config import JudgeConfig as RunJudge
    from art_pipeline.tasks import JudgeConfig as TaskJudge

    assert LibraryJudge is RunJudge is TaskJudge is RulerConfig
    judge = LibraryJudge(judge_model="openai/o4-mini", extra_litellm_params={"temperature": 0.2})  # ART's names
    assert judge.model == "openai/o4-mini" and judge.litellm_params == {"temperature": 0.2} and judge.timeout_s == 120


def test_sampling_defaults_fit_tool_calls_and_follow_the_environments_protocol(tiny_model_path, tmp_path):
    plain = preflight(RunConfig(**_base(tiny_model_path, tmp_path)))
    assert plain.sampling.max_tokens == 256 and plain.eval_sampling()["temperature"] == plain.sampling.temperature
    tau2 = preflight(RunConfig(**_base(tiny_model_path, tmp_path, environment={"name": "tau2-retail"})))
    assert tau2.sampling.max_tokens == 2048  # tau2's protocol: a booking call alone is hundreds of tokens
    assert (
        tau2.sampling.temperature == 1.0 and tau2.eval_sampling()["temperature"] == 0.0
    )  # GRPO samples, tau2 evaluates at 0
    own = preflight(
        RunConfig(
            **_base(
                tiny_model_path,
                tmp_path,
                environment={"name": "tau2-retail"},
                sampling={"max_tokens": 8},
                eval={"temperature": 0.7},
            )
        )
    )
    assert own.sampling.max_tokens == 8 and own.eval_sampling() == {"temperature": 0.7, "max_tokens": 8}


def test_a_server_placed_on_gpus_this_machine_lacks_is_refused_by_preflight(tiny_model_path, tmp_path, monkeypatch):
    """server.gpu_ids (ART's inference_gpu_ids) on a machine without those GPUs is refused before any work, naming
    the field, as LocalBackend refuses it before its server starts."""
    from art_core import gpus

    placed = RunConfig(**_base(tiny_model_path, tmp_path, server={"gpu_ids": [1]}, train={"ranks": 1}))
    monkeypatch.setattr(gpus, "visible_gpus", lambda environ=None: [])
    with pytest.raises(PreflightError, match="no CUDA GPU") as e:
        preflight(placed)
    assert e.value.field == "server.gpu_ids"
    monkeypatch.setattr(gpus, "visible_gpus", lambda environ=None: ["0"])
    with pytest.raises(PreflightError, match="names GPU 1"):
        preflight(placed)
    monkeypatch.setattr(gpus, "visible_gpus", lambda environ=None: ["0", "1"])
    assert preflight(placed).server.gpu_ids == [1]


def test_the_sft_flows_config_is_preflighted_by_its_own_checks(tiny_model_path, tmp_path, monkeypatch):
    from art_pipeline.flows.sft import SFTRunConfig

    monkeypatch.chdir(tmp_path)
    cfg = SFTRunConfig(storage_url=str(tmp_path), project="p", model="m", base_model=tiny_model_path, data="d.jsonl")
    with pytest.raises(PreflightError) as refused:
        preflight(cfg)
    assert refused.value.field == "data" and "d.jsonl" in str(refused.value)
    (tmp_path / "d.jsonl").write_text("{}\n")
    assert preflight(cfg).data == str(tmp_path / "d.jsonl")
    with pytest.raises(TypeError, match="a flow's config, not dict"):
        preflight({"data": "d.jsonl", "base_model": tiny_model_path})  # fields alone make no config
