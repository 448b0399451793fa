"""The GPU ask of a train step sent to a work pool (`scale.train_deployment`): the child flow run carries
`gpus:N` (N = `train.ranks`) among its tags, where the Prefect UI lists runs, and `config.ranks` in its
parameters; the train-step flow on the worker refuses a step whose ranks outnumber the GPUs it sees before it
reads anything, naming the deployment, so the caller's RemoteTrainError shows why.

No GPU here: the worker's GPU count is torch's `cuda.device_count`, set per test (the rest is real: the
Prefect test server, the flow, the trainer's own check in art_core.training.distributed).
"""

from __future__ import annotations

import pytest

from art_core.store import ModelRef
from art_core.training.config import TrainConfig


def _ref(tmp_path) -> ModelRef:
    return ModelRef(storage_url=str(tmp_path), project="gpus", model="agent", base_model="unused")


@pytest.mark.parametrize("config, tag", [(TrainConfig(ranks=4), "gpus:4"), (TrainConfig(), "gpus:1")])
def test_the_flow_run_sent_to_the_pool_carries_its_gpu_ask(prefect_api, tmp_path, config, tag):
    from prefect.client.orchestration import get_client

    from art_pipeline.flows.train_step import train_step_flow
    from art_pipeline.tasks.remote import _start

    deployment_id = train_step_flow.to_deployment(name="gpu-ask-test").apply()
    try:
        child = _start("train-step/gpu-ask-test", _ref(tmp_path), str(tmp_path / "0000.jsonl"), 0, config)
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(child.id)
            client.delete_flow_run(run.id)  # scheduled, never picked up: no worker polls this deployment
    finally:  # the session's Prefect server is shared: other tests list its deployments
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)
    assert tag in run.tags and {"art", "train-step"} <= set(run.tags)
    assert run.parameters["config"]["ranks"] == config.ranks  # what the worker's flow checks


def test_ray_ranks_are_not_tagged_as_the_workers_gpus():
    from art_pipeline.tasks.remote import gpu_ask

    assert gpu_ask(TrainConfig(ranks=16, ranks_on="ray")) == "ray-ranks:16"


@pytest.fixture
def worker_gpus(monkeypatch):
    """Set how many GPUs the worker's torch sees (and CUDA_VISIBLE_DEVICES to match)."""
    import torch

    def see(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(str(i + 1) for i in range(count)))

    return see


def test_a_step_with_more_ranks_than_the_workers_gpus_fails_at_once_naming_the_deployment(
    prefect_api, tmp_path, monkeypatch, worker_gpus
):
    from art_pipeline.flows.train_step import train_step_flow

    worker_gpus(4)
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__NAME", "gpu")  # as a run of train-step/gpu sees it
    never_written = str(tmp_path / "0002.jsonl")  # reading it first would raise FileNotFoundError instead
    with pytest.raises(ValueError) as refused:
        train_step_flow(_ref(tmp_path), never_written, 2, TrainConfig(ranks=7))
    message = str(refused.value)
    assert message.startswith("train step 3 sent to deployment 'train-step/gpu', worker on "), message
    assert "TrainConfig.ranks is 7 but 4 GPU(s) are visible here (CUDA_VISIBLE_DEVICES=1,2,3,4)" in message
    assert "scripts/launch-cluster.sh --train-ranks 7" in message and "lower train.ranks" in message


@pytest.mark.parametrize("gpus", [7, 0])  # enough GPUs; none (the ranks are CPU processes with gloo)
def test_a_step_whose_ranks_fit_goes_on_to_read_its_rollouts(prefect_api, tmp_path, worker_gpus, gpus):
    from art_pipeline.flows.train_step import train_step_flow

    worker_gpus(gpus)
    with pytest.raises(FileNotFoundError, match="the scored rollouts of step 3"):
        train_step_flow(_ref(tmp_path), str(tmp_path / "0002.jsonl"), 2, TrainConfig(ranks=7))
