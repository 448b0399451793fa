"""The train step on a GPU work pool: a flow in this process sends step 1's training to the `train-step/gpu`
deployment (created from deployments/prefect.yaml with `prefect deploy`), a `prefect worker start --pool
art-gpu` process trains it, and both sides meet only through S3 (moto) and the Prefect API.

What a user relies on: the checkpoint and its history record land in the run's storage, written by
another process; the flow waits and gets the step's result; a step already trained is not queued again;
a train deployment that does not exist is refused before any work, with the commands that create it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time

import pytest
from prefect import flow
from prefect.exceptions import ObjectNotFound

from art_core.store import ModelRef
from art_core.training.config import TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFECT = os.path.join(os.path.dirname(sys.executable), "prefect")
DEPLOYMENT = "train-step/gpu"


def _cli(args: list[str], env: dict, timeout: float = 300) -> str:
    r = subprocess.run(
        [PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"prefect {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def gpu_worker(prefect_api, s3_server, tmp_path_factory):
    """The art-gpu pool (limit 1) and the train-step/gpu deployment as the README makes them, and a worker
    process polling the pool with the S3 keys in its environment. Yields (worker process, its log path)."""
    env = dict(os.environ, PREFECT_API_URL=prefect_api, PREFECT_WORKER_QUERY_SECONDS="2", **s3_server)
    t0 = time.perf_counter()
    _cli(["work-pool", "create", "art-gpu", "--type", "process", "--overwrite"], env)
    _cli(["work-pool", "set-concurrency-limit", "art-gpu", "1"], env)
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    with open(log_path, "w") as log:  # the worker starts while the deployment is made (it only polls till then)
        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "art-gpu", "--name", "gpu-worker-test"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _cli(["deploy", "--name", "gpu", "--prefect-file", "deployments/prefect.yaml"], env)
        print(f"pool + deployment + worker started in {time.perf_counter() - t0:.1f}s")
        yield worker, log_path
    finally:
        worker.terminate()  # by its own pid; the flow runs it started have ended with the test
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _run_config(s3_root: str, tiny_model_path: str, inference_url: str):
    """One tiny step of tic-tac-toe (moves constrained) whose train step goes to the art-gpu pool."""
    from tests.pipeline.test_train_flow import run_config

    return run_config(
        tiny_model_path,
        s3_root,
        inference_url,
        project="remote",
        steps=1,
        sampling={"temperature": 1.0, "max_tokens": 8},
        eval_every=0,
        scale={"train_deployment": DEPLOYMENT},
    )


@flow(name="train-remotely")
def train_remotely(ref: ModelRef, scored_uri: str, step: int, config: TrainConfig):
    """What the train flow does with `scale.train_deployment` set: check the deployment, then send the step."""
    from art_pipeline.tasks.remote import check_train_deployment, train_step_remotely

    assert check_train_deployment(DEPLOYMENT, ref.storage_url) == "art-gpu"  # before any work
    state = train_step_remotely(DEPLOYMENT, ref, scored_uri, step, config, poll_seconds=0.5, return_state=True)
    return state.name, state.result()


def _child_runs(client, deployment_id) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))


@pytest.mark.slow  # a Prefect worker, moto and vLLM (make test hands slow files out first)
@pytest.mark.vllm
def test_train_step_runs_on_the_gpu_pool_worker_with_storage_on_s3(
    gpu_worker, s3_root, tiny_model_path, vllm_endpoint, monkeypatch
):
    from prefect.client.orchestration import get_client

    from art_pipeline.flows.train import train
    from art_pipeline.tasks.remote import RemoteTrainError

    worker, worker_log = gpu_worker
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key)
    config = _run_config(s3_root, tiny_model_path, vllm_endpoint.base_url)
    ref = ModelRef(storage_url=s3_root, project="remote", model="agent", base_model=tiny_model_path)
    store = ref.store()

    # The train flow itself: it gathers and scores here, and sends the step to the pool (scale.train_deployment).
    t0 = time.perf_counter()
    state = train(config, return_state=True)
    first_seconds = time.perf_counter() - t0
    summary = state.result()
    assert worker.poll() is None, "the worker process died"
    assert summary.trained_steps == [1] and summary.checkpoints[1] == store.checkpoint(1)
    assert store.is_complete(1) and store.checkpoint(1).startswith(s3_root)
    recorded = store.step_metrics(1, "train/")
    assert {"train/loss", "train/reward"} <= set(recorded), recorded

    # The step ran as a child flow run of the deployment, on pool art-gpu, in a process of our worker's.
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        children = _child_runs(client, deployment.id)
        assert len(children) == 1, [c.name for c in children]
        child = children[0]
        assert child.state.name == "Completed" and child.work_pool_name == "art-gpu"
        assert child.name == "remote-agent-step-1"
        pid = int(str(child.infrastructure_pid).rsplit(":", 1)[-1])
        assert pid not in (os.getpid(), worker.pid)  # a process of its own, started by the worker
        # Linked under this flow run in the UI. Task runs are recorded from events, in batches once a second
        # (flows.lifetime): the final state can land a moment after the flow returns.
        deadline, parent_task = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            with contextlib.suppress(ObjectNotFound):
                parent_task = client.read_task_run(child.parent_task_run_id)
            if parent_task is not None and parent_task.state.is_final():
                break
            time.sleep(0.2)
        assert parent_task is not None, "the task that ran the remote step was never recorded"
        assert parent_task.flow_run_id == state.state_details.flow_run_id and parent_task.state.is_completed()
    assert str(child.id) in worker_log.read_text(), "the worker we started did not run the step"

    # Again: the checkpoint exists, so nothing is queued on the pool and nothing is trained.
    etags = {p: i["ETag"] for p, i in store.storage.fs.find(store.checkpoint(1), detail=True).items()}
    t0 = time.perf_counter()
    again = train(config)
    second_seconds = time.perf_counter() - t0
    assert again.trained_steps == [] and again.checkpoints == summary.checkpoints
    with get_client(sync_client=True) as client:
        assert len(_child_runs(client, deployment.id)) == 1
    assert {p: i["ETag"] for p, i in store.storage.fs.find(store.checkpoint(1), detail=True).items()} == etags

    # A step that fails on the worker fails the caller's task, naming the child run, its state and message.
    broken = store.scored("train", 1)
    store.storage.write_text(broken, "not a rollout file\n")
    t0 = time.perf_counter()
    with pytest.raises(RemoteTrainError) as failed:
        train_remotely(ref, broken, 1, config.train)
    failed_seconds = time.perf_counter() - t0
    message = str(failed.value)
    assert "'remote-agent-step-2'" in message and "ended Failed" in message
    assert f"rollout file {broken} is damaged at line 1" in message  # damaged, with its line: not "missing"
    assert "prefect worker start --pool art-gpu" in message
    assert not store.is_complete(2)
    print(
        f"remote train step: {first_seconds:.1f}s; again (checkpoint exists): {second_seconds:.1f}s; "
        f"failing step: {failed_seconds:.1f}s"
    )


def test_local_storage_is_warned_about(gpu_worker, tmp_path, caplog):
    from art_pipeline.tasks.remote import check_train_deployment

    with caplog.at_level(logging.WARNING, logger="art_pipeline.tasks.remote"):
        assert check_train_deployment(DEPLOYMENT, str(tmp_path)) == "art-gpu"
    assert "is a local folder" in caplog.text and "s3://" in caplog.text


def test_missing_or_wrong_train_deployment_is_refused_with_how_to_create_it(prefect_api, tmp_path):
    from art_pipeline.tasks.remote import TrainDeploymentError, check_train_deployment

    with pytest.raises(TrainDeploymentError) as refused:
        check_train_deployment("train-step/a100", str(tmp_path))
    message = str(refused.value)
    assert "'train-step/a100' does not exist" in message and prefect_api in message
    assert "prefect --no-prompt deploy --name a100 --prefect-file deployments/prefect.yaml" in message
    assert "prefect worker start --pool art-gpu" in message
    with pytest.raises(TrainDeploymentError, match="not 'flow/deployment'"):
        check_train_deployment("gpu")
    other = train_remotely.to_deployment(name="not-a-train-step").apply()  # a deployment of another flow
    try:
        with pytest.raises(TrainDeploymentError, match="runs flow 'train-remotely', not 'train-step'"):
            check_train_deployment("train-remotely/not-a-train-step", "s3://bucket/runs")
    finally:  # the session's Prefect server is shared: other tests list its deployments
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            client.delete_deployment(other)
    with pytest.raises(TrainDeploymentError, match="cannot see it"):
        check_train_deployment(DEPLOYMENT, "memory://runs")
