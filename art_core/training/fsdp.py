"""Sharding the frozen base model over a data-parallel step's ranks with FSDP2, for a base too large for one GPU.

`TrainConfig.shard_base` ('auto', 'on', 'off') decides it with `TrainConfig.ranks` > 1; the trainer session
(session.py) loads each rank's model through here:

    shard, why = want_sharding(config, model_config, dtype_bytes=2, device=torch.device("cuda"))
    if shard:
        shard_base(peft_model, device)     # every decoder layer, then the decoder (embeddings, final norm)

What is sharded and what is not (measured on CPU with gloo, torch 2.13, tests/training/test_fsdp.py):
  - `fully_shard` on every decoder layer and on the decoder: each rank keeps 1/ranks of those weights (dim 0),
    and a layer's weights are all-gathered just before it runs and freed after it (again in backward). The
    decoder is the root because the trainer calls it directly (packing.batch_logprobs), not the causal LM.
  - The LoRA parameters (everything with requires_grad) are FSDP's `ignored_params`: whole plain tensors on
    every rank, not reduced by FSDP. Their gradients are summed by the step's one explicit all-reduce
    (distributed.all_reduce_gradients), as without sharding, so nothing is counted twice, the clipped norm is the
    global one, AdamW's state stays whole and small, and rank 0 writes the same adapter folder as one process.
  - A separate LM head stays whole on every rank (the trainer reads its weight outside any forward); a head
    tied to the embeddings keeps the loaded full tensor, so a tied model saves nothing on its embeddings.
  - Frozen weights have no gradients, so FSDP reduce-scatters nothing: a sharded step's only collectives are
    the all-gathers of the forward and backward passes and the existing LoRA all-reduce.
Every pass is therefore a collective: every rank runs as many passes in a mini-batch as the busiest rank
(`pad_to_lockstep`), a rank short of sequences passes over one short sequence with no trained token.

Loading: rank 0 alone reads the base into host memory and wraps it with the seeded LoRA; the other ranks build
the same model on the meta device (no memory). After sharding, rank 0 broadcasts each tensor once and every rank
keeps its shard (torch.distributed.checkpoint's set_model_state_dict, broadcast_from_rank0), then the buffers.
So host memory holds the weights once per node for the moment of the load, not once per rank.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def parameter_count(model_config: Any) -> int:
    """Parameters of the causal LM `model_config` describes (tied weights once), counted on the meta device.

    >>> from transformers import Qwen2Config
    >>> parameter_count(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=100, tie_word_embeddings=True))
    43584
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    return sum(p.numel() for p in model.parameters())


def want_sharding(config: Any, model_config: Any, dtype_bytes: int, device: Any) -> tuple[bool, str]:
    """Whether this step shards its base (`config.shard_base`), and why. Outside a process group of more than one
    rank: never ('on' there is refused). 'auto' shards on CUDA only, when the activation budget left after
    loading the whole model (memory.FREE_FRACTION of what is free) would not hold one pass of memory.MIN_TOKENS
    with activation checkpointing; every rank takes the answer of the tightest one (one all-reduce).

    >>> want_sharding(TrainConfig(), model_config, 2, torch.device("cpu"))     # doctest: +SKIP
    (False, 'not a multi-rank step')
    """
    from art_core.training import distributed

    if distributed.current() is None:
        if config.shard_base == "on":
            raise ValueError(
                "shard_base='on' shards the base model over the step's ranks, but this step runs in one process: "
                "set ranks > 1 (or shard_base 'auto'/'off')"
            )
        return False, "not a multi-rank step"
    if config.shard_base == "on":
        return True, "shard_base='on'"
    if config.shard_base == "off":
        return False, "shard_base='off'"
    if getattr(device, "type", str(device)) != "cuda":
        return False, "shard_base='auto' shards on CUDA only"
    import torch
    import torch.distributed as dist

    from art_core.training.memory import FREE_FRACTION, MIN_TOKENS, SAFETY, model_per_token_bytes

    weights = parameter_count(model_config) * dtype_bytes
    free, _total = torch.cuda.mem_get_info(device)
    one_pass = MIN_TOKENS * SAFETY * model_per_token_bytes(model_config, dtype_bytes, checkpointing=True)
    short = torch.tensor([int(FREE_FRACTION * (free - weights) < one_pass)], device=device)
    dist.all_reduce(short, op=dist.ReduceOp.MAX)
    gib = 1 << 30
    if short.item():
        return True, f"shard_base='auto': {weights / gib:.1f} GiB of weights leave a rank too little of its memory"
    return False, f"shard_base='auto': {weights / gib:.1f} GiB of weights fit beside a pass ({free / gib:.1f} free)"


def shard_base(model: Any, device: Any) -> dict[str, float]:
    """Shard `model`'s (a peft model's) frozen base over the process group with FSDP2, in place: every decoder
    layer, then the decoder; trainable parameters stay whole (see the module doc) and move to `device` with
    the parts FSDP does not own. Rank 0's model holds the weights; the other ranks' may be on the meta device
    (session._load builds them there), and every rank receives its part from rank 0. Returns {'units': sharded modules, 'held_gib': weights this rank holds}."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = torch.device(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    causal_lm = model.get_base_model()
    decoder = causal_lm.get_decoder()
    trained = {p for p in model.parameters() if p.requires_grad}
    on_meta = any(p.device.type == "meta" for p in model.parameters())
    # Rank 0 loaded the weights (and drew the seeded LoRA); the others built the model on the meta device
    # (session._load) and receive them. Rank 0's full tensors are kept by reference until they are sent.
    full = model.state_dict() if dist.get_rank() == 0 else {}
    layers = list(decoder.layers)
    for layer in layers:
        fully_shard(layer, mesh=mesh, ignored_params=trained)
    fully_shard(decoder, mesh=mesh, ignored_params=trained)
    _receive_from_rank0(model, full, on_meta, device)
    del full
    _move_unsharded(model, device)
    return {"units": len(layers) + 1, "held_gib": held_bytes(model) / (1 << 30)}


def _receive_from_rank0(model: Any, full: dict[str, Any], on_meta: bool, device: Any) -> None:
    """Fill the meta-device ranks' model from rank 0's `full` state dict: each tensor is broadcast once and every
    rank keeps its shard of it (a whole copy of what is not sharded), then the buffers a state dict leaves out
    (rotary frequencies) are broadcast too."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if on_meta:
        model.to_empty(device=device)  # storage for this rank's shards and whole tensors, filled below
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=options)
    for buffer in model.buffers():
        if buffer.device != device:
            buffer.data = buffer.data.to(device)
        dist.broadcast(buffer, src=0)


def _move_unsharded(model: Any, device: Any) -> None:
    """Move what FSDP left where it was loaded (LoRA weights, a separate LM head, buffers) to `device`; the
    shards are there already. Not `model.to`: FSDP keeps references to its sharded parameters."""
    from torch.distributed.tensor import DTensor

    for module in model.modules():
        for p in module.parameters(recurse=False):
            if not isinstance(p, DTensor) and p.device != device:
                p.data = p.data.to(device)
        for name, b in module.named_buffers(recurse=False):
            if b.device != device:
                setattr(module, name, b.to(device))


def held_bytes(model: Any) -> int:
    """Bytes of parameters this rank holds: a sharded parameter's local shard, any other whole."""
    from torch.distributed.tensor import DTensor

    total = 0
    for p in model.parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        total += local.numel() * local.element_size()
    return total


def is_sharded(model: Any) -> bool:
    """True when `model`'s base is sharded by `shard_base`."""
    from torch.distributed.fsdp import FSDPModule

    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return isinstance(causal_lm.get_decoder(), FSDPModule)


def pad_to_lockstep(packed: list[list[Any]], idle: Any, device: Any) -> int:
    """Append `idle` (a packed pass, packing.PackedBatch) with its trained tokens removed to each mini-batch's
    passes until this rank runs as many as the busiest rank: with a sharded base every pass gathers weights from
    all ranks, so a rank that stopped early would leave the others waiting. The idle pass adds nothing to the
    loss, gradients or token counts. Returns the idle passes added over all ranks (one all-reduce).

    >>> pad_to_lockstep([[part_a, part_b], []], idle, "cpu")     # rank 1 of 2 ran [[p], [q]]   # doctest: +SKIP
    1
    """
    import dataclasses

    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    counts = torch.zeros(world, len(packed), dtype=torch.int64, device=device)
    counts[rank] = torch.tensor([len(parts) for parts in packed], device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)  # every rank's row: each sees all the counts
    most = counts.max(dim=0).values.tolist()
    none = idle.target_row[:0]
    spare = dataclasses.replace(
        idle,
        target_row=none,
        target_pos=none,
        old_logprobs=idle.old_logprobs[:0],
        advantages=idle.advantages[:0],
        weights=idle.weights[:0],
        seq=None if idle.seq is None else idle.seq[:0],
        sampler_logprobs=None,
        source_pos=None if idle.source_pos is None else idle.source_pos[:0],
        sequences=[],
        in_batch_tokens=0,
        shared_prefixes=0,
    )
    for parts, n in zip(packed, most):
        parts.extend(dataclasses.replace(spare) for _ in range(n - len(parts)))
    return int(world * sum(most) - counts.sum().item())
