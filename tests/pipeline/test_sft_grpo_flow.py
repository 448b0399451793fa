"""SFT then GRPO as one train-flow run (RunConfig.sft): the retail expert's demonstrations (a cached task), SFT
epochs, GRPO steps numbered after them, an evaluation; failed during SFT, the re-run trains only the epochs not
finished. Real Prefect test server, real vLLM, the tiny model (which learns nothing: the test is the mechanics)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from art_pipeline.flows.config import RunConfig
from art_pipeline.flows.preflight import PreflightError, preflight
from tests.pipeline.test_train_flow import history, run_config, run_flow, task_states


def sft_run(model_path: str, storage_url: str, inference_url: str, **update) -> RunConfig:
    """2 SFT epochs on 3 retail demonstrations, then 1 GRPO step of one group of 2 short rollouts, then eval."""
    cfg = dict(
        name="cs",
        environment={"name": "retail", "options": {"max_turns": 2}},
        sft={"epochs": 2, "batch_size": 2, "peak_lr": 1e-2, "schedule_type": "constant", "demonstrations_limit": 3},
        steps=3,
        groups_per_step=1,
        group_size=2,
        sampling={"max_tokens": 16},
        eval_every=3,
        eval={"scenarios": 1, "trials": 1},
    )
    cfg.update(update)
    return run_config(model_path, storage_url, inference_url, **cfg)


@pytest.mark.vllm
def test_sft_then_grpo_resumes_after_a_failure_in_sft(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    from art_pipeline.flows.train import train
    from art_pipeline.tasks import sft as sft_tasks

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    cfg = sft_run(tiny_model_path, str(tmp_path / "runs"), vllm_endpoint.base_url)
    real_epoch, trained = sft_tasks.sft_epoch, []

    def epoch_counted(store, base_model, data, spec, epoch, step, *args, **kwargs):
        result = real_epoch(store, base_model, data, spec, epoch, step, *args, **kwargs)
        if result.trained:
            trained.append(result.step)
        return result

    def crashing_in_epoch_2(store, base_model, data, spec, epoch, step, *args, **kwargs):
        if epoch == 1:
            raise RuntimeError("injected: the run dies during SFT epoch 2")
        return epoch_counted(store, base_model, data, spec, epoch, step, *args, **kwargs)

    monkeypatch.setattr(sft_tasks, "sft_epoch", crashing_in_epoch_2)
    assert train(cfg, return_state=True).is_failed()
    assert trained == [1]

    monkeypatch.setattr(sft_tasks, "sft_epoch", epoch_counted)
    summary, run_id = run_flow(cfg)
    assert trained == [1, 2]  # epoch 1 was not trained again
    assert summary.sft.start_step == 0 and summary.sft.trained_steps == [2]
    assert summary.trained_steps == [3] and summary.phases == {1: "sft", 2: "sft", 3: "grpo"}
    assert list(summary.rewards) == [3] and list(summary.evaluations) == [3]
    states = task_states(run_id, expect={"demonstrations retail train", "sft step 1", "sft step 2", "train step 3"})
    assert states["demonstrations retail train"] == "Cached"  # built by the failed run, read back from the cache
    assert states["sft step 1"] == "Cached" and states["sft step 2"] == "Completed"
    # GRPO rolled out only its own step, from SFT's last checkpoint; history names each step's phase.
    rollouts = tmp_path / "runs" / "pipe" / "models" / "cs" / "trajectories" / "train"
    assert sorted(p.name for p in rollouts.iterdir()) == ["0002.jsonl"]
    records = history(cfg.storage_url, cfg)
    assert [r["step"] for r in records if "sft/loss" in r] == [1, 2]
    assert [r["step"] for r in records if "train/loss" in r] == [3]

    # Forked at SFT's last epoch into a new name (RunConfig.fork_from), a run with another GRPO learning rate
    # trains GRPO only: SFT's epochs come with the fork, and the source is left as it was.
    fork = sft_run(
        tiny_model_path,
        str(tmp_path / "runs"),
        vllm_endpoint.base_url,
        name="cs-b",
        fork_from={"model": "cs", "step": 2},
        train={"learning_rate": 5e-3, "old_logprobs": "recompute"},
    )
    summary, _ = run_flow(fork)
    assert trained == [1, 2]  # no SFT epoch trained again
    assert summary.trained_steps == [3] and summary.phases == {1: "sft", 2: "sft", 3: "grpo"}
    forked = tmp_path / "runs" / "pipe" / "models" / "cs-b"
    assert sorted(p.name for p in (forked / "trajectories" / "train").iterdir()) == ["0002.jsonl"]
    adapter = "checkpoints/{:04d}/adapter_model.safetensors".format
    source = tmp_path / "runs" / "pipe" / "models" / "cs"
    assert (forked / adapter(2)).read_bytes() == (source / adapter(2)).read_bytes()
    assert (forked / "checkpoints" / "0003" / "COMPLETE").exists()  # its own step 3, under its own settings:
    assert [r["train/learning_rate"] for r in history(fork.storage_url, fork) if "train/loss" in r] == [5e-3]
    assert [r["train/learning_rate"] for r in records if "train/loss" in r] == [2e-3]
    assert history(cfg.storage_url, cfg) == records


def test_the_form_refuses_an_sft_section_that_cannot_run(tiny_model_path, tmp_path):
    base = dict(model_path=tiny_model_path, storage_url=str(tmp_path), inference_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValidationError, match="has no expert"):
        sft_run(**base, environment={"name": "tic-tac-toe"})
    with pytest.raises(ValidationError, match="counts SFT's 2 epochs"):
        sft_run(**base, steps=1)
    with pytest.raises(PreflightError, match="sft.demonstrations: .*no such file"):
        preflight(sft_run(**base, sft={"demonstrations": str(tmp_path / "missing.jsonl")}))
    demos = tmp_path / "demos.jsonl"
    demos.write_text("")
    cfg = preflight(sft_run(**base, sft={"demonstrations": str(demos), "epochs": 1, "peak_lr": 1e-3}))
    assert cfg.sft.spec().peak_lr == 1e-3 and cfg.sft.demonstrations == str(demos)
    assert sft_run(**base, sft=None).sft is None  # GRPO only, as before


@pytest.mark.filterwarnings("ignore:Logger 'prefect.task_runs' attempted to send logs")  # a task called outside a flow
def test_cached_demonstrations_are_built_again_when_the_expert_changes(prefect_api, tmp_path, monkeypatch):
    """A rerun reads the demonstrations it built; an edited expert, tool or policy (another code digest) builds
    them again into a file of its own, instead of training on the old conversations."""
    from art_core.envs.customer_service import expert
    from art_pipeline.tasks import result_storage_for
    from art_pipeline.tasks.sft import build_demonstrations

    storage = str(tmp_path / "runs")
    build = build_demonstrations.with_options(result_storage=result_storage_for(storage))
    real, built = expert.build_demonstrations, []

    def counted(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(expert, "build_demonstrations", counted)
    first = build(storage, "pipe", "retail", "train", 0, 2)
    assert build(storage, "pipe", "retail", "train", 0, 2) == first and len(built) == 1  # read back from the cache
    assert first.endswith(f"retail-train-seed0-first2-{expert.expert_fingerprint('retail')}.jsonl")

    monkeypatch.setattr(expert, "expert_fingerprint", lambda domain: "0edited0code")
    second = build(storage, "pipe", "retail", "train", 0, 2)
    assert len(built) == 2 and second.endswith("retail-train-seed0-first2-0edited0code.jsonl")
    assert len(list((tmp_path / "runs" / "pipe" / "demonstrations").iterdir())) == 2  # the first file is kept


@pytest.mark.filterwarnings("ignore:Logger 'prefect.task_runs' attempted to send logs")  # a task called outside a flow
def test_tau2_demonstrations_are_played_on_tau2s_own_tools_and_keyed_on_its_options(
    prefect_api, tiny_model_path, tmp_path, monkeypatch
):
    """sft.demonstrations 'expert' on tau2-retail: the form takes it, and the cached task plays tau2's expert with the
    run's environment options it depends on (a file of its own per data folder, judge or judged tasks left out)."""
    from art_core.envs import experts
    from art_core.envs.tau2.data import Tau2DataMissing
    from art_pipeline.tasks import result_storage_for
    from art_pipeline.tasks.sft import build_demonstrations

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    options = {"user": "scripted", "max_steps": 40, "skip_judged": True}
    base = dict(model_path=tiny_model_path, storage_url=str(tmp_path), inference_url="http://127.0.0.1:1/v1")
    try:
        cfg = sft_run(**base, environment={"name": "tau2-retail", "options": options})
    except ValidationError as e:
        if "Tau2DataMissing" in str(e):  # pragma: no cover - the registry's tau2 data is part of make install
            pytest.skip("tau2 data not installed")
        raise
    assert cfg.sft.demonstrations == "expert"
    storage = str(tmp_path / "runs")
    build = build_demonstrations.with_options(result_storage=result_storage_for(storage))
    kept = experts.demonstration_options("tau2-retail", options)
    try:
        uri = build(storage, "pipe", "tau2-retail", "train", 0, 3, kept)
    except Tau2DataMissing:  # pragma: no cover
        pytest.skip("tau2 data not installed")
    rows = [json.loads(line) for line in open(uri)]
    assert [r["task_id"] for r in rows] == ["0", "1", "6"]  # train 2-4 need tau2's judge: left out by the option
    tools = {t["function"]["name"] for t in rows[0]["tools"]}
    assert "exchange_delivered_order_items" in tools and "transfer_to_human_agents" in tools  # tau2's own
    assert rows[0]["messages"][0]["role"] == "system" and "retail agent" in rows[0]["messages"][0]["content"].lower()
    fingerprint = experts.expert_fingerprint("tau2-retail")
    assert f"tau2-retail-train-seed0-first3-{fingerprint}-" in uri
    assert kept == {"skip_judged": True}  # the customer is always the scripted one, the limits tau2's own
    other = build(storage, "pipe", "tau2-retail", "train", 0, 3, {"skip_judged": False})
    assert other != uri and build(storage, "pipe", "tau2-retail", "train", 0, 3, kept) == uri  # cached
