"""deployments/prefect.yaml as a user runs it: `prefect deploy --all`, then a run triggered through the API
with parameters, picked up by a process worker, completes; the nightly retrain schedule exists."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.vllm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFECT = os.path.join(os.path.dirname(sys.executable), "prefect")


def _cli(args: list[str], env: dict, timeout: float = 300) -> str:
    r = subprocess.run(
        [PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"prefect {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


def test_deploy_from_prefect_yaml_trigger_with_parameters_and_nightly_schedule(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint
):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    env = dict(
        os.environ,
        PREFECT_API_URL=prefect_api,
        ART_INFERENCE_API_KEY=vllm_endpoint.api_key or "",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path / "wandb"),
    )
    _cli(["work-pool", "create", "art-process", "--type", "process", "--overwrite"], env)
    _cli(["work-pool", "create", "art-gpu", "--type", "process", "--overwrite"], env)  # the train-step deployment's
    _cli(["deploy", "--all", "--prefect-file", "deployments/prefect.yaml"], env)

    with get_client(sync_client=True) as client:  # the session's server: other tests' deployments are left out
        ours = {"train", "evaluate", "deploy", "retrain-nightly", "gpu"}
        deployments = {d.name: d for d in client.read_deployments() if d.name in ours}
    assert set(deployments) == ours
    nightly = deployments["retrain-nightly"]
    assert [(s.schedule.cron, s.active) for s in nightly.schedules] == [("0 3 * * *", False)]  # paused until asked
    assert {n: d.work_pool_name for n, d in deployments.items() if d.work_pool_name != "art-process"} == {
        "gpu": "art-gpu"
    }
    assert "config" in deployments["train"].parameter_openapi_schema["properties"]  # the UI form

    storage = tmp_path / "art"
    config = {
        "project": "deployed",
        "model": "agent-d",
        "base_model": tiny_model_path,
        "storage_url": str(storage),
        "environment": {"name": "tic-tac-toe", "options": {"constrain_moves": True}},
        "steps": 1,
        "groups_per_step": 1,
        "group_size": 2,
        "sampling": {"max_tokens": 8},
        "eval_every": 0,
        "train": {"learning_rate": 2e-3, "old_logprobs": "recompute"},
        "inference_url": vllm_endpoint.base_url,
        "report_to_wandb": False,
    }
    flow_run = run_deployment("train/train", parameters={"config": config}, timeout=0)
    worker = subprocess.Popen(
        [PREFECT, "worker", "start", "--pool", "art-process", "--run-once"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = worker.communicate(timeout=400)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 60
        state = client.read_flow_run(flow_run.id).state
        while not state.is_final() and time.monotonic() < deadline:
            time.sleep(1)
            state = client.read_flow_run(flow_run.id).state
        ran = client.read_flow_run(flow_run.id)
    assert state.is_completed(), f"flow run ended {state.name}: {state.message}\nworker output:\n{out[-3000:]}"
    assert ran.parameters["config"]["model"] == "agent-d"
    assert (storage / "deployed" / "models" / "agent-d" / "checkpoints" / "0001" / "COMPLETE").exists()
