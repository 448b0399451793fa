"""ART's helper modules and names, without a server: art_core.utils, .retry, .dev, .local, and the exports.

Each test states what an ART user relies on: the batches iterate_dataset yields (and resuming at a
step), that @art.retry retries what it should and no more, that art.dev configs land on our
TrainConfig/ServerConfig or are reported, and that every name ART's examples import exists.
"""

from __future__ import annotations

import asyncio
import warnings

import openai
import pytest

import art_core as art
from art_core import dev
from art_core.utils import iterate_dataset, limit_concurrency


def test_every_name_arts_examples_import_exists():
    for name in [
        "Model",
        "TrainableModel",
        "Trajectory",
        "TrajectoryGroup",
        "History",
        "TrainConfig",
        "TrainResult",
        "gather_trajectories",
        "gather_trajectory_groups",
        "retry",
        "dev",
        "utils",
        "Messages",
        "MessagesAndChoices",
        "Tools",
        "Backend",
    ]:
        assert hasattr(art, name), name
    from art_core.local import LocalBackend
    from art_core.local.backend import LocalBackend as Same
    from art_core.rewards import ruler_score_group  # noqa: F401

    assert LocalBackend is Same is art.local.LocalBackend
    for name in [
        "InternalModelConfig",
        "InitArgs",
        "EngineArgs",
        "PeftArgs",
        "TrainerArgs",
        "TrainConfig",
        "OpenAIServerConfig",
        "ServerArgs",
    ]:
        assert hasattr(art.dev, name), name


def test_iterate_dataset_covers_each_epoch_once_in_a_new_order_and_resumes_at_a_step():
    data = list(range(10))
    batches = list(iterate_dataset(data, groups_per_step=4, num_epochs=2, use_tqdm=False))
    assert [b.step for b in batches] == list(range(6))  # ceil(10 / 4) = 3 steps per epoch
    assert [(b.epoch, b.epoch_step) for b in batches] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [len(b.items) for b in batches] == [4, 4, 2, 4, 4, 2]
    for epoch in (0, 1):
        seen = [x for b in batches if b.epoch == epoch for x in b.items]
        assert sorted(seen) == data  # every item once per epoch
    assert [x for b in batches[:3] for x in b.items] != [x for b in batches[3:] for x in b.items]
    # ART 2025 unpacked a tuple; the same batch reads both ways
    items, epoch, step, epoch_step = batches[4]
    assert (items, epoch, step, epoch_step) == (batches[4].items, 1, 4, 1)
    # resuming at step 4 yields exactly the batches a full run yields from step 4 on
    resumed = list(iterate_dataset(data, groups_per_step=4, num_epochs=2, initial_step=4, use_tqdm=False))
    assert resumed == batches[4:]


async def test_limit_concurrency_caps_calls_in_flight_per_key():
    running: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}

    @limit_concurrency(2, derive_key=lambda key, _: key)
    async def work(key: str, i: int) -> int:
        running[key] += 1
        peak[key] = max(peak[key], running[key])
        await asyncio.sleep(0.01)
        running[key] -= 1
        return i

    out = await asyncio.gather(*(work(k, i) for i in range(6) for k in "ab"))
    assert sorted(out) == sorted(list(range(6)) * 2)
    assert peak == {"a": 2, "b": 2}


async def test_retry_retries_only_the_named_exceptions_then_gives_up():
    calls = []

    @art.retry(max_attempts=3, delay=0, exceptions=(ValueError,))
    async def flaky(n_failures: int) -> str:
        calls.append(1)
        if len(calls) <= n_failures:
            raise ValueError("transient")
        return "done"

    assert await flaky(2) == "done" and len(calls) == 3
    calls.clear()
    with pytest.raises(ValueError):
        await flaky(5)
    assert len(calls) == 3

    @art.retry(delay=0, exceptions=openai.LengthFinishReasonError)  # one class, not a tuple (ART's notebooks)
    def other() -> None:
        calls.append(1)
        raise KeyError("not retried")

    calls.clear()
    with pytest.raises(KeyError):
        other()
    assert len(calls) == 1


def test_dev_configs_map_onto_ours_and_the_rest_is_reported_once():
    internal = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=2048),
        engine_args=art.dev.EngineArgs(enforce_eager=True, gpu_memory_utilization=0.5, num_scheduler_steps=1),
        peft_args=art.dev.PeftArgs(r=4, lora_alpha=8),
        trainer_args=art.dev.TrainerArgs(max_grad_norm=0.5, run_name="first-try"),
    )
    model = art.TrainableModel(name="m", project="p", base_model="/m", _internal_config=internal)
    # ART 0.3's trainer_args.run_name labels the W&B run; only ART 0.5.20's run_name= moves the run's storage
    assert model._run_label == "first-try" and model.run_name is None and model.storage_name == "m"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = dev.resolve_train_config(
            model,
            art.TrainConfig(learning_rate=1e-3),
            {"epsilon": 0.1},
            {"ppo": False, "logprob_calculation_chunk_size": 8, "kimi_k2_tau": 0.1, "mask_prob_ratio": True},
        )
        server = dev.server_overrides(model._internal_config)
    assert (cfg.max_seq_len, cfg.lora_rank, cfg.lora_alpha, cfg.max_grad_norm) == (2048, 4, 8, 0.5)
    assert (cfg.learning_rate, cfg.epsilon, cfg.loss, cfg.logit_chunk_tokens) == (1e-3, 0.1, "cispo", 8)
    assert cfg.kimi_k2_tau == 0.1  # mapped since issue 23
    assert server == {"gpu_memory_utilization": 0.5, "extra_args": ["--enforce-eager"]}
    text = " ".join(str(w.message) for w in caught)
    for reported in ("mask_prob_ratio", "num_scheduler_steps"):
        assert reported in text
    assert dev.resolve_train_config(model, cfg) == cfg  # resolving twice changes nothing
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        dev.resolve_train_config(model, None, None, {"mask_prob_ratio": True})
    assert not [w for w in again if "mask_prob_ratio" in str(w.message)]  # said once per process


def test_a_prompted_model_may_name_its_provider_but_stores_under_a_safe_name():
    gpt = art.Model(name="openai/gpt-4.1", project="p")
    assert gpt.get_inference_name() == "openai/gpt-4.1" and gpt.storage_name == "openai--gpt-4.1"
    for bad in ("openai/../x", "/gpt", "openai/"):
        with pytest.raises(ValueError):
            art.Model(name=bad, project="p")
    with pytest.raises(ValueError):  # a trained model's name names adapters and folders
        art.TrainableModel(name="a/b", project="p", base_model="/m")
