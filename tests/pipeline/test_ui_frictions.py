"""What a Prefect user trips over, fixed: paused schedules, partial overrides that merge with the
deployment's config, a warning when a run replaces it whole, and a metrics table that leads with the reward. (A user's own `tasks` or `flows` module hides nothing of ours:
tests/test_packaging.py.)

The override tests use the session's real Prefect test server; none starts vLLM.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _prefect_yaml() -> dict:
    with open(os.path.join(REPO, "deployments", "prefect.yaml")) as f:
        return yaml.safe_load(f)


def test_schedules_are_created_paused():
    schedules = [(d["name"], s) for d in _prefect_yaml()["deployments"] for s in d.get("schedules") or []]
    assert schedules, "the nightly retrain should keep its schedule"
    assert all(s.get("active") is False for _, s in schedules), schedules


def test_deployment_defaults_are_the_demo_runs(smollm2_path, tiny_model_path, tmp_path):
    """A run started from the UI with the defaults is `make demo`'s run (SmolLM2 found as the demo finds it, the
    word quiz, its settings): it continues the demo from its cache. train/tiny-demo is `make demo-tiny`'s."""
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.demo import demo_config, real_demo_config
    from art_pipeline.flows.preflight import preflight

    definitions = _prefect_yaml()["definitions"]
    real = preflight(RunConfig(**definitions["run"]))  # as it is: base_model 'smollm2', storage ./.art
    assert real == preflight(real_demo_config(smollm2_path, "./.art"))
    assert real.base_model == smollm2_path and real.environment.name == "word-quiz"
    tiny = dict(definitions["tiny_run"], base_model=tiny_model_path, storage_url=str(tmp_path))
    assert preflight(RunConfig(**tiny)) == preflight(demo_config(tiny_model_path, str(tmp_path)))
    by_name = {d["name"]: d for d in _prefect_yaml()["deployments"]}
    assert by_name["train"]["parameters"]["config"] == definitions["run"]
    assert by_name["tiny-demo"]["parameters"]["config"] == definitions["tiny_run"]


def test_parse_and_merge_overrides():
    from art_pipeline.flows.overrides import deep_merge, missing_fields, parse_assignments

    over = parse_assignments(["steps=12", "train.learning_rate=0.02", "environment.options.seed=2", "model=agent-002"])
    assert over == {
        "steps": 12,
        "train": {"learning_rate": 0.02},
        "environment": {"options": {"seed": 2}},
        "model": "agent-002",
    }
    base = _prefect_yaml()["definitions"]["run"]
    merged = deep_merge(base, over)
    assert merged["train"] == {**base["train"], "learning_rate": 0.02}  # old_logprobs kept
    assert merged["environment"]["name"] == base["environment"]["name"] and merged["steps"] == 12
    assert missing_fields(base, merged) == []
    assert set(missing_fields(base, {"steps": 5})) >= {"environment", "train", "eval_every", "sampling"}
    with pytest.raises(ValueError, match="not field=value"):
        parse_assignments(["steps"])


@pytest.fixture
def demo_deployment(prefect_api, tiny_model_path, tmp_path):
    """The train flow registered as a deployment with the demo's config (no worker: runs stay Scheduled)."""
    from art_pipeline.flows.train import train

    run = dict(_prefect_yaml()["definitions"]["tiny_run"], base_model=tiny_model_path, storage_url=str(tmp_path))
    train.to_deployment(name="frictions", parameters={"config": run}).apply()
    return "train/frictions", run


def test_partial_override_merges_with_the_deployments_config(demo_deployment, prefect_api):
    from prefect.client.orchestration import get_client

    from art_pipeline.flows.overrides import run_with_overrides

    name, run = demo_deployment
    flow_run = run_with_overrides(name, {"steps": 12, "train": {"learning_rate": 0.02}}, timeout=0)
    with get_client(sync_client=True) as client:
        sent = client.read_flow_run(flow_run.id).parameters["config"]
        client.delete_flow_run(flow_run.id)
    assert sent["steps"] == 12 and sent["train"] == {**run["train"], "learning_rate": 0.02}
    assert {k: v for k, v in sent.items() if k not in ("steps", "train")} == {
        k: v for k, v in run.items() if k not in ("steps", "train")
    }
    # The command line does the same.
    r = subprocess.run(
        [sys.executable, "-m", "flows.overrides", name, "steps=4", "sampling.max_tokens=6"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PREFECT_API_URL=prefect_api),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"steps": 4' in r.stdout and "flow run" in r.stdout


def _execute(flow_run, flow_fn):
    """Run a created flow run in this process, as a worker would (so its context knows its deployment)."""
    from prefect.flow_engine import run_flow

    return run_flow(flow_fn, flow_run=flow_run, parameters=flow_run.parameters)


def test_a_run_that_replaces_the_whole_config_warns(demo_deployment, caplog):
    from prefect import flow
    from prefect.deployments import run_deployment

    from art_pipeline.flows.overrides import warn_if_config_replaced

    name, run = demo_deployment

    @flow(name="train")  # the deployment's flow name; only what this test runs differs
    def probe(config: dict) -> list[str]:
        return warn_if_config_replaced()

    whole = {
        "project": run["project"],
        "model": "agent-002",
        "base_model": run["base_model"],
        "steps": 5,
        "environment": {"name": run["environment"]["name"]},
    }
    run_logs = logging.getLogger("prefect.flow_runs")  # Prefect's loggers do not propagate to caplog's root handler
    run_logs.addHandler(caplog.handler)
    try:
        replaced = run_deployment(name, parameters={"config": whole}, timeout=0)
        missing = _execute(replaced, probe)
        text = caplog.text
        caplog.clear()
        merged = run_deployment(name, parameters={"config": {**run, "steps": 5}}, timeout=0)
        assert _execute(merged, probe) == []
        assert "replaced the deployment's whole config" not in caplog.text
    finally:
        run_logs.removeHandler(caplog.handler)
    assert {"train", "sampling", "eval_every", "eval", "storage_url"} <= set(missing)
    assert "environment.name" not in missing and "steps" not in missing
    assert "replaced the deployment's whole config" in text and "train (deployment: {" in text
    assert "python -m flows.overrides train/frictions" in text
    assert probe.fn({}) == []  # outside a deployment run: nothing to compare with


def test_metrics_table_leads_with_reward_and_rounds():
    from art_core.reporting import display_table, metrics_table

    history = [
        {
            "step": 1,
            "recorded_at": 1.0,
            "train/loss": 0.0123456,
            "train/kl_to_sampler": 3.2e-7,
            "train/reward": 0.2512345,
            "train/reward_max": 1.0,
            "train/seconds": 1.23456,
        },
        {"step": 1, "recorded_at": 2.0, "val/reward": 0.61, "val/pass^2": 0.333333333, "val/pass^1": 0.5},
    ]
    (row,) = display_table(metrics_table(history))
    assert list(row)[:6] == ["step", "train/reward", "val/reward", "val/pass^1", "val/pass^2", "train/reward_max"]
    assert row["train/reward"] == 0.251 and row["val/pass^2"] == 0.333 and row["train/seconds"] == 1.235
    assert row["train/kl_to_sampler"] == pytest.approx(3.2e-7)  # small values keep their digits
