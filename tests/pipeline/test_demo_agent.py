"""`make demo-agent` (flows.demo_agent) end to end on the tiny model: expert demonstrations -> SFT -> GRPO in one
train-flow run, then base / SFT / SFT+GRPO evaluated on the same val tasks beside the never-acts policy, per
category, through the real Prefect test server and a real vLLM server. The tiny model learns nothing; what is
checked is what a user reads: every row of the table, the write pass^1 headline that never-acts cannot pass,
the phases timed, and a re-run that trains nothing again.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.vllm


def test_demo_agent_trains_sft_then_grpo_and_prints_the_category_table(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch, capsys
):
    from art_pipeline.flows.demo_agent import main

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    monkeypatch.setenv("ART_TINY_MODEL", tiny_model_path)
    argv = ["--tiny", "--storage", str(tmp_path / "art"), "--inference-url", vllm_endpoint.base_url]
    argv += ["--demonstrations", "3", "--sft-epochs", "1", "--grpo-steps", "1", "--scenarios", "3", "--tries", "2"]
    result = main(argv)
    out = capsys.readouterr().out

    summary = result["train"]
    assert summary.phases == {1: "sft", 2: "grpo"} and summary.trained_steps == [2]
    reports = result["reports"]
    assert [r.step for r in list(reports.values())[2:]] == [0, 1, 2]  # base, SFT, SFT+GRPO
    never = reports["never acts"]  # retail's first 3 val tasks: refuse, write, write
    assert set(never.by_category) == {"write", "refuse"} and never.headline.metric == "write pass^1"
    assert never.headline.value == 0.0 and never.by_category["refuse"].pass_k[1] == 1.0
    # the ceiling: the expert on the same tasks under the same max_turns (2 here: too few for its writes)
    expert = reports["expert (code)"]
    assert expert.model == "expert" and expert.by_category.keys() == never.by_category.keys()
    assert expert.headline.value == 0.0
    for label in ("never acts", "expert (code)", "base model (step 0)", "SFT (step 1)", "SFT+GRPO (step 2)"):
        assert label in out
    assert "headline: write pass^1" in out and "seconds per phase: model ready" in out
    timed = result["phases"]  # the training flow's time split into its SFT epoch and GRPO step
    assert 0 < timed["SFT epochs"] + timed["GRPO steps"] <= timed["demonstrations + SFT + GRPO"]
    assert timed["SFT epochs"] > 0 and timed["GRPO steps"] > 0 and "(SFT epochs " in out
    kinds = out.split("## Per kind of write task")[1]  # the two write tasks' kinds, never-acts right in 0 tries
    assert "| never acts (baseline) | expert (code) (baseline) | base model (step 0) | SFT (step 1) |" in kinds
    assert set(never.by_kind) and all(f"| {kind} | " in kinds for kind in never.by_kind)
    assert all(score.pass_k[1] == 0.0 for score in never.by_kind.values())

    again = main(argv)  # finished: from the cache, nothing trained again
    assert again["train"].trained_steps == [] and again["train"].sft.trained_steps == []
    assert again["phases"]["SFT epochs"] == timed["SFT epochs"]  # the times of the run that trained it
    capsys.readouterr()

    # A GRPO variant from the SFT epoch, under a new name: SFT is not trained again, the base not evaluated
    fork = argv + ["--model", "variant", "--fork-from", "retail-seed0:1", "--train-reward", "safe_progress"]
    fork += ["--grpo-lr", "3e-4", "--grpo-optimizer-steps", "2"]
    varied = main(fork + ["--skip-base"])
    out = capsys.readouterr().out
    assert varied["train"].trained_steps == [2] and varied["train"].sft.trained_steps == []
    assert list(varied["reports"]) == ["never acts", "expert (code)", "SFT (step 1)", "SFT+GRPO (step 2)"]
    assert "base model (step 0)" not in out and "SFT+GRPO (step 2)" in out
    # the forked SFT step is the source's checkpoint: its evaluation is the source's, not a second sample
    assert varied["reports"]["SFT (step 1)"] == reports["SFT (step 1)"]
    assert varied["train"].model_path.rstrip("/").endswith("/variant")
    history = tmp_path / "art" / "demo-agent-tiny" / "models" / "variant" / "history.jsonl"
    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert [r["train/learning_rate"] for r in records if "train/learning_rate" in r] == [3e-4]  # the variant's rate
    (step,) = [r for r in records if "train/optimizer_steps" in r]  # an Adam step a mini-batch, none if no signal
    assert step["train/optimizer_steps"] == min(2, step["train/trained_trajectories"])


def test_another_base_model_trains_under_its_own_name_and_a_missing_file_is_refused_first(tmp_path, capsys):
    from art_pipeline.flows.demo_agent import main, model_name

    assert model_name("airline", 2, str(tmp_path / "gemma-3-270m-q4_k_m.gguf")) == "airline-seed2-gemma-3-270m-q4_k_m"
    assert model_name("retail", 0) == "retail-seed0"  # SmolLM2's runs keep their names
    with pytest.raises(SystemExit):
        main(["--base-model", str(tmp_path / "missing.gguf"), "--storage", str(tmp_path / "art")])
    assert "no such GGUF file" in capsys.readouterr().err
    assert not (tmp_path / "art").exists()  # refused before anything was stored
    with pytest.raises(SystemExit):
        main(["--fork-from", "retail-seed0:0", "--storage", str(tmp_path / "art")])
    assert "give MODEL or MODEL:STEP" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--grpo-lr", "0", "--storage", str(tmp_path / "art")])
    assert "give a learning rate above 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--domain", "tau2-retail", "--train-reward", "safe_progress", "--storage", str(tmp_path / "art")])
    assert "tau2-retail trains on tau2's own reward ('task', the default) or on 'progress'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--grpo-optimizer-steps", "0", "--storage", str(tmp_path / "art")])
    assert "--grpo-optimizer-steps 0: give 1 or more Adam steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--lora-rank", "0", "--storage", str(tmp_path / "art")])
    assert "--lora-rank 0: a LoRA rank is a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "art").exists()


def test_the_lora_rank_reaches_sft_and_grpo_alike():
    from art_pipeline.flows.demo_agent import agent_config

    default, wider = agent_config("/models/m", "./.art"), agent_config("/models/m", "./.art", lora_rank=32)
    assert (default.train.lora_rank, default.train.lora_alpha) == (8, 16)  # TrainConfig's own defaults
    assert (wider.train.lora_rank, wider.train.lora_alpha) == (32, 64)
    assert default.train.num_optimizer_steps == 1  # one Adam step per GRPO step unless asked
    assert agent_config("/models/m", "./.art", grpo_optimizer_steps=4).train.num_optimizer_steps == 4


def test_grpo_optimizer_steps_reach_the_runs_train_config(tmp_path, tiny_model_path, monkeypatch):
    import art_pipeline.flows.train as train_flow
    from art_pipeline.flows.demo_agent import main

    class Trained(Exception):
        pass

    def train(config):  # the run as the flow receives it, stopped before any server starts
        raise Trained(config)

    monkeypatch.setattr(train_flow, "train", train)
    monkeypatch.setenv("ART_TINY_MODEL", tiny_model_path)
    with pytest.raises(Trained) as run:
        main(["--tiny", "--storage", str(tmp_path / "art"), "--grpo-optimizer-steps", "3"])
    assert run.value.args[0].train.num_optimizer_steps == 3


def test_a_fork_from_a_model_that_does_not_exist_is_refused_before_any_server(tmp_path, tiny_model_path, monkeypatch):
    from art_pipeline.flows.demo_agent import main
    from art_pipeline.flows.preflight import PreflightError

    monkeypatch.setenv("ART_TINY_MODEL", tiny_model_path)
    argv = ["--tiny", "--storage", str(tmp_path / "art"), "--model", "variant", "--fork-from", "retail-seed9:2"]
    with pytest.raises(PreflightError, match=r"fork_from.*retail-seed9.*no complete checkpoint"):
        main(argv)
    assert not (tmp_path / "art" / "demo-agent-tiny" / "models" / "variant").exists()


@pytest.mark.slow
def test_the_demo_trains_on_tau2s_own_tasks_and_tools(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    """--domain tau2-retail: tau2's expert demonstrates train tasks on tau2's tools, SFT then GRPO train (here on
    tau2's partial credit, --train-reward progress), and the evaluation plays tau2's test tasks (those its LLM
    judge need not score) once each, on tau2's reward, with the never-acts floor and tau2's expert as the
    ceiling."""
    from art_core.envs.tau2.data import Tau2DataMissing, find_folder
    from art_pipeline.flows.demo_agent import main

    try:
        find_folder("retail", None)
    except Tau2DataMissing:  # pragma: no cover - the registry's tau2 data is part of make install
        pytest.skip("tau2 data not installed")
    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    monkeypatch.setenv("ART_TINY_MODEL", tiny_model_path)
    argv = ["--tiny", "--domain", "tau2-retail", "--storage", str(tmp_path / "art")]
    argv += ["--inference-url", vllm_endpoint.base_url, "--demonstrations", "3", "--sft-epochs", "1"]
    argv += ["--grpo-steps", "1", "--scenarios", "2", "--skip-base", "--train-reward", "progress"]
    result = main(argv)

    summary = result["train"]
    assert summary.phases == {1: "sft", 2: "grpo"} and summary.trained_steps == [2] and summary.sft.trained_steps == [1]
    demos = list((tmp_path / "art" / "demo-agent-tiny" / "demonstrations").iterdir())
    assert len(demos) == 1 and demos[0].name.startswith("tau2-retail-train-seed0-first3-")
    rows = [json.loads(line) for line in demos[0].read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["0", "1", "6"]  # the first train tasks the judge need not score
    reports = result["reports"]
    assert list(reports) == ["never acts", "expert (code)", "SFT (step 1)", "SFT+GRPO (step 2)"]
    for report in reports.values():  # tau2's first two unjudged test tasks, one try each (temperature 0)
        assert report.split == "val" and report.trials == 1 and list(report.per_scenario) == ["5", "9"]
    assert reports["never acts"].headline.value == 0.0 and reports["SFT (step 1)"].step == 1
    # GRPO's rollouts were rewarded with tau2's partial credit; the evaluation's with tau2's own reward
    model_dir = tmp_path / "art" / "demo-agent-tiny" / "models" / "tau2-retail-seed0"
    gathered = [
        json.loads(line) for line in (model_dir / "trajectories" / "train" / "0001.jsonl").read_text().splitlines()
    ]
    rollouts = [t for g in gathered for t in g["trajectories"]]
    assert rollouts and all(t["reward"] == t["metrics"]["progress"] for t in rollouts)
    evaluated = [
        json.loads(line) for line in (model_dir / "trajectories" / "val" / "0002.jsonl").read_text().splitlines()
    ]
    assert all(t["reward"] == t["metrics"]["task_reward"] for g in evaluated for t in g["trajectories"])


def test_tau2_trains_on_its_own_reward_unless_progress_is_asked():
    from art_pipeline.flows.demo_agent import agent_config

    assert "train_reward" not in agent_config("/models/m", "./.art", domain="tau2-retail").environment.options
    shaped = agent_config("/models/m", "./.art", domain="tau2-retail", train_reward="progress")
    assert shaped.environment.options["train_reward"] == "progress"
    assert agent_config("/models/m", "./.art").environment.options["train_reward"] == "progress"  # retail's default
