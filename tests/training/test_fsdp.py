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


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
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


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
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


def load_sharded_and_check(base_model: str) -> dict:
    """On each of a step's ranks: load the base sharded as a step does, counting the reads of its weights from disk;
    then compare every sharded weight (gathered whole), every buffer and the LoRA with what the files hold."""
    import transformers
    from torch.distributed.tensor import DTensor

    import tempfile

    from art_core.training.session import trainer_session

    real, reads = transformers.AutoModelForCausalLM.from_pretrained, []

    def counted(*args, **kwargs):
        reads.append(1)
        return real(*args, **kwargs)

    transformers.AutoModelForCausalLM.from_pretrained = counted
    try:
        config, storage = TrainConfig(ranks=2, shard_base="on"), Storage(tempfile.mkdtemp())
        with trainer_session(base_model, config, storage, "p", "load", 0) as session:  # checkpoint 0: the base
            model = session.model.get_base_model()
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = real
    truth = real(base_model, dtype=next(model.parameters()).dtype)
    expected = {**dict(truth.named_buffers()), **truth.state_dict()}  # tied weights under both names
    wrong, lora = 0, 0.0
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if "lora_" in name:
            lora += float(tensor.detach().double().sum())
            continue
        whole = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor  # a collective: same order on all
        wrong += int(not torch.equal(whole, expected[name.replace(".base_layer", "")]))
    sharded = sum(isinstance(p, DTensor) for p in model.parameters())
    reads_all, wrong_all, lora_high, sharded_all = distributed.all_reduce_sums([len(reads), wrong, lora, sharded])
    return {"reads": reads_all, "wrong": wrong_all, "lora_same": lora_high == 2 * lora, "sharded": sharded_all}


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_only_rank_0_reads_a_sharded_base_and_every_rank_gets_its_weights(tiny_model_path):
    """The other ranks build the model on the meta device and receive their shards, the buffers and the seeded
    LoRA from rank 0: host memory holds the weights once per node, not once per rank."""
    import json

    got = json.loads(distributed.run_on_ranks(2, f"{__name__}.load_sharded_and_check", {"base_model": tiny_model_path}))
    assert got["reads"] == 1 and got["wrong"] == 0 and got["lora_same"] and got["sharded"] > 0


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
