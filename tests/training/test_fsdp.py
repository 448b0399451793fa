"""A sharded base (TrainConfig.shard_base, art_core.training.fsdp) on CPU: gloo, 2 spawned processes, the tiny model.

A 2-rank step with the base sharded by FSDP2 equals the 1-process step (loss, written adapter, Adam's moments), with
the ranks running different numbers of passes (idle passes keep them in step) and activation checkpointing on; its
checkpoint resumes on 1 process; sharding asked of one process is refused before anything loads or spawns; 'auto'
keeps whole replicas on CPU.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from art_core.storage import Storage
from art_core.store import ModelStore
from art_core.training import distributed, fsdp
from art_core.training.config import TrainConfig
from art_core.training.trainer import train_grpo_step
from tests.training.test_distributed import CFG, _assert_same, _files, _step_groups, assert_same_step

# test_distributed's step, in 5 mini-batches of 3-4 sequences and passes of about one sequence, so the ranks run
# different numbers of passes (the short one adds idle passes), with each decoder layer recomputed in backward.
ONE = CFG.model_copy(update={"num_optimizer_steps": 5, "tokens_per_forward": 8, "gradient_checkpointing": True})
SHARDED = TrainConfig.model_validate({**ONE.model_dump(), "ranks": 2, "shard_base": "on"})


def _train(model: str, store: Storage, name: str, step: int, config: TrainConfig):
    groups = _step_groups(step)
    return train_grpo_step(
        base_model=model, groups=groups, config=config, storage=store, project="p", name=name, step=step
    )


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory):
    """'one': 2 steps on 1 process; 'sharded': step 0 on 2 ranks with the base sharded, step 1 on 1 process."""
    from art_core.training.session import clear_model_cache

    store = Storage(str(tmp_path_factory.mktemp("fsdp")))
    clear_model_cache()
    results = {
        "one": [_train(tiny_model_path, store, "one", 0, ONE)],
        "sharded": [_train(tiny_model_path, store, "sharded", 0, SHARDED)],
    }
    clear_model_cache()  # step 1 of 'one' from storage too, as 'sharded' does
    results["one"].append(_train(tiny_model_path, store, "one", 1, ONE))
    results["sharded"].append(_train(tiny_model_path, store, "sharded", 1, ONE))
    clear_model_cache()
    return store, results


def test_a_sharded_two_rank_step_equals_the_one_process_step(runs):
    store, results = runs
    one, two = results["one"][0].metrics, results["sharded"][0].metrics
    assert two["ranks"] == 2 and two["sharded_base"] == 1 and "sharded_base" not in one
    assert two["gradient_checkpointing"] == 1 and two["idle_passes"] > 0  # the ranks' pass counts differed
    # The 1-process adapter folder, and Adam's moments: the LoRA gradients were summed once, not reduced again by FSDP.
    assert_same_step(store, results, "sharded")


def test_a_sharded_checkpoint_resumes_on_one_process(runs):
    store, results = runs
    assert results["sharded"][1].step == 2 and ModelStore(store, "p", "sharded").is_complete(2)
    resumed, plain = results["sharded"][1].metrics, results["one"][1].metrics
    assert "sharded_base" not in resumed
    assert resumed["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-7)
    _assert_same(_files(store, "one", 2)[0], _files(store, "sharded", 2)[0])


def test_a_sharded_two_rank_sft_step_equals_the_one_process_step(tiny_model_path, tmp_path):
    """SFT's batches over ranks with the base sharded: ranks run as many passes as the busiest, same adapter."""
    import tests.training.test_distributed as dp
    from art_core.training.session import clear_model_cache

    store = Storage(str(tmp_path))
    clear_model_cache()
    one = dp._sft(tiny_model_path, store, "one", 0, 1)
    two = dp._sft(tiny_model_path, store, "two", 0, 2, shard_base="on")
    clear_model_cache()
    assert two.metrics["sharded_base"] == 1 and two.metrics["loss"] == pytest.approx(one.metrics["loss"], rel=1e-4)
    dp._assert_same(dp._files(store, "one", 1)[0], dp._files(store, "two", 1)[0])


def test_sharding_asked_of_one_process_is_refused_before_anything_loads(tiny_model_path, tmp_path, monkeypatch):
    with pytest.raises(ValidationError, match="shard_base='on' shards the base model .* but ranks is 1"):
        TrainConfig(shard_base="on")

    def no_spawn(*args, **kwargs):
        raise AssertionError("a worker was spawned")

    monkeypatch.setattr(distributed, "run_on_ranks", no_spawn)
    unchecked = ONE.model_copy(update={"shard_base": "on"})  # model_copy skips validation: the loader checks again
    with pytest.raises(ValueError, match="this step runs in one process: set ranks > 1"):
        _train(tiny_model_path, Storage(str(tmp_path)), "refused", 0, unchecked)


def test_auto_keeps_a_whole_replica_on_cpu(monkeypatch):
    """'auto' shards only on CUDA, from the memory arithmetic; on CPU a multi-rank step keeps today's replicas."""
    from transformers import AutoConfig

    monkeypatch.setattr(distributed, "current", lambda: distributed.Ranks(0, 2))
    shape = AutoConfig.for_model("qwen2")
    assert fsdp.want_sharding(TrainConfig(ranks=2), shape, 4, torch.device("cpu")) == (
        False,
        "shard_base='auto' shards on CUDA only",
    )
    assert fsdp.want_sharding(TrainConfig(ranks=2, shard_base="on"), shape, 4, torch.device("cpu"))[0]
