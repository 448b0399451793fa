"""One field says how many GPUs a step uses, `TrainConfig.ranks`, and both doors hand it to the step as given.

The Prefect form's `train.ranks` (RunConfig, validated from the JSON the form sends) through the real train task
on a real Prefect test server, and LocalBackend's `config=` / ART-style keyword through a real register and
train against the session's vLLM server. The step itself is replaced by one that notes the TrainConfig it
was called with and stops there (what N ranks train is tests/training/test_distributed.py's subject).
"""

from __future__ import annotations

import pytest

from art_core import TrainableModel, Trajectory, TrajectoryGroup
from art_core.training.config import TrainConfig


class Stop(Exception):
    """Raised by the stand-in step once it has noted its config."""


@pytest.fixture
def step_configs(monkeypatch) -> list[TrainConfig]:
    import art_core.training.trainer as trainer

    seen: list[TrainConfig] = []

    def step(**kwargs):
        seen.append(kwargs["config"])
        raise Stop

    monkeypatch.setattr(trainer, "train_grpo_step", step)  # looked up per call by art_core.step
    return seen


def _groups() -> list[TrajectoryGroup]:
    prompt = [{"role": "user", "content": "hi"}]
    return [TrajectoryGroup(Trajectory(messages_and_choices=prompt, reward=float(r)) for r in (0, 1))]


def test_the_forms_train_ranks_reaches_the_step(prefect_api, step_configs, tiny_model_path, tmp_path):
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.train import refs
    from art_pipeline.tasks.train import train_step

    form = {  # what the Prefect UI sends for the train flow's `config` parameter
        "project": "p",
        "model": "m",
        "base_model": tiny_model_path,
        "storage_url": str(tmp_path / "art"),
        "environment": {"name": "tic-tac-toe"},
        "train": {"learning_rate": 1e-3, "ranks": 2},
    }
    config = RunConfig.model_validate(form)
    ref, _ = refs(config)
    store = ref.store()
    uri = store.trajectories("train", 0)
    store.write_groups(uri, _groups())
    with pytest.raises(Stop):
        train_step(ref, uri, 0, config.train)  # as flows/train.py calls it
    assert [c.ranks for c in step_configs] == [2]


@pytest.mark.vllm
async def test_local_backends_ranks_reach_the_step(vllm_server, step_configs, tiny_model_path, tmp_path):
    from art_core.local_backend import LocalBackend

    backend = LocalBackend(str(tmp_path / "art"), server=vllm_server, cache_dir=str(tmp_path / "cache"))
    model = TrainableModel(name="ranks", project="p", base_model=tiny_model_path)
    await model.register(backend)
    try:
        with pytest.raises(Stop):
            await model.train(_groups(), TrainConfig(ranks=2, learning_rate=1e-3))
        with pytest.raises(Stop):
            await backend.train(model, _groups(), ranks=3)  # ART's backend-first form, our field's name
    finally:
        await backend.close()
    assert [c.ranks for c in step_configs] == [2, 3]
    assert step_configs[0].learning_rate == 1e-3
