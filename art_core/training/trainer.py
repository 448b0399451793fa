"""The GRPO train step: trajectory groups in, a trained LoRA checkpoint out. Synchronous and heavy.

    result = train_grpo_step(base_model="/models/tiny", groups=groups, config=TrainConfig(learning_rate=2e-3),
                        storage=Storage("./.art"), project="demo", name="agent", step=0)
    result.step, result.checkpoint_path    # 1, './.art/demo/models/agent/checkpoints/0001'

One step, as a reader would follow it:
 1. open the trainer session (session.py, shared with SFT): the lock, the cached model, the adapter and
    optimizer of checkpoint `step` (kept in memory between steps of one run; a fresh LoRA at step 0),
    this step's hyperparameters,
 2. tokenize every trajectory (tokenize.py), drop bad ones with a warning naming them,
 3. group-relative advantages (advantages.py); groups without signal are skipped and counted,
 4. size a forward pass from the model and the memory budget (memory.py), switch attention to the
    packed mode (attention.py), activation checkpointing on only where memory needs it, and the LoRA
    linears to their fused forward (fused_lora.py),
 5. per mini-batch: aggregation weights, pack into rows and passes (packing.py; the prefix a group's
    sequences share computed once, prefixes.py), forward + chunked log-probs (logprobs.py) + loss
    (losses.py) + backward per pass (gradient accumulation), clip the gradient norm, one AdamW step,
 6. save checkpoint `step + 1` with the tokenizer (checkpoints.py) and return its metrics, which say
    what the memory defaults chose: tokens_per_pass, passes, peak_memory_gib, and what sharing saved:
    tokens_computed vs tokens_in_batch.

Errors vs warnings. A problem with one trajectory or group (an empty group, a trajectory without a
sampled Choice or without logprobs, a NaN reward, a sequence longer than max_seq_len) is a
`TrainingDataWarning` naming the group and trajectory and what to do; that input is dropped and the
rest of the step trains (`warnings.simplefilter("error", TrainingDataWarning)` makes them fatal).
A problem that would make every trajectory wrong is an exception: a chat template that is not
prefix-preserving, a missing checkpoint to resume from, an unknown loss, or a step in which *no*
trajectory could be tokenized. A step with nothing to learn from (all groups without signal) still
writes checkpoint step + 1, unchanged, and says why in metrics["nothing_trained_reason"].
"""

from __future__ import annotations

import logging
import math
import random
import time
import warnings
from typing import Any

from art_core.storage import Storage
from art_core.training import distributed, fsdp
from art_core.training.advantages import balance_advantages, step_advantages
from art_core.training.attention import choose_attention, packed_attention
from art_core.training.config import TrainConfig
from art_core.training.fused_lora import fused_lora
from art_core.training.losses import (
    AGGREGATIONS,
    LossStats,
    grpo_loss,
    option_metrics_end,
    option_metrics_start,
    sampler_kl,
)
from art_core.training.memory import (
    SAFETY,
    PeakMemory,
    activation_budget,
    choose_checkpointing,
    cpu_sequence_budget,
    model_per_token_bytes,
    tokens_per_pass,
)
from art_core.training.packing import batch_logprobs, pack_sequences
from art_core.training.reference import reference_policy
from art_core.training.result import TrainResult
from art_core.training.session import TrainerSession, trainer_session
from art_core.training.tokenize import TokenizedTrajectory, TrajectoryError, tokenize_histories
from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)


class TrainingDataWarning(UserWarning):
    """One trajectory or group was dropped from a step; the message names it and says what to do."""


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, TrainingDataWarning, stacklevel=3)


def prepare_sequences(
    groups: list[TrajectoryGroup], tokenizer: Any, config: TrainConfig, max_seq_len: int
) -> tuple[list[TokenizedTrajectory], dict[str, Any]]:
    """Tokenize, drop bad input with a warning, attach advantages; returns (trainable sequences, counts)."""
    # kept[group][trajectory] = that trajectory's sequences: its conversation and each additional history
    # (ART's sub-agent or post-reset conversations), all trained with the trajectory's advantage.
    kept: list[list[list[TokenizedTrajectory]]] = []
    dropped, problems = 0, []
    for gi, group in enumerate(groups):
        seqs = []
        if len(group) == 0:
            _warn(
                f"group {gi} is empty ({len(group.exceptions)} rollouts raised): it is skipped. Look at the "
                "group's exceptions; gather with a max_exceptions that drops such groups before training."
            )
        for ti, traj in enumerate(group.trajectories):
            if not math.isfinite(traj.reward):
                _warn(
                    f"group {gi}, trajectory {ti}: reward is {traj.reward}: it is dropped from this step. Make the "
                    "reward function return a finite number (a failed judge call should raise, not score NaN)."
                )
                dropped += 1
                continue
            try:
                seqs.append(
                    tokenize_histories(traj, tokenizer, group_index=gi, trajectory_index=ti, max_seq_len=max_seq_len)
                )
            except TrajectoryError as exc:
                _warn(f"{exc} This trajectory is dropped from the step.")
                problems.append(str(exc))
                dropped += 1
        kept.append(seqs)
    attempted = sum(len(g) for g in groups)
    if attempted and dropped == attempted and problems:
        raise ValueError(f"no trajectory of this step could be tokenized ({dropped} dropped); the first: {problems[0]}")

    adv = step_advantages(
        [[traj_seqs[0].reward for traj_seqs in seqs] for seqs in kept],
        scale_by_std=config.scale_rewards,
        std_epsilon=config.std_epsilon,
        tolerance=config.reward_tolerance,
    )
    out = []
    for seqs, advantages in zip(kept, adv.per_group):
        if advantages is None:
            continue
        for traj_seqs, a in zip(seqs, balance_advantages(advantages, config.advantage_balance)):
            if config.drop_zero_advantage and abs(a) <= 1e-12:
                continue
            for s in traj_seqs:
                s.advantage = a
                out.append(s)
    rewards = [t.reward for g in groups for t in g.trajectories if math.isfinite(t.reward)]
    mean = sum(rewards) / len(rewards) if rewards else 0.0
    counts = {
        "reward": mean,
        "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) if rewards else 0.0,
        "trajectories": attempted,
        "dropped_trajectories": dropped,
        "skipped_groups": adv.skipped_groups,
        "skipped_reasons": adv.skipped_reasons,
    }
    return out, counts


def train_grpo_step(
    *,
    base_model: str,
    groups: list[TrajectoryGroup],
    config: TrainConfig,
    storage: Storage,
    project: str,
    name: str,
    step: int,
) -> TrainResult:
    """Train one GRPO step from checkpoint `step` and save checkpoint `step + 1` (see the module docstring).
    With `config.ranks` > 1 outside a process group, the step runs on that many local workers (distributed.py)."""
    if config.ranks > 1 and distributed.current() is None:
        return distributed.train_grpo_step_on_ranks(
            base_model=base_model, groups=groups, config=config, storage=storage, project=project, name=name, step=step
        )
    with trainer_session(base_model, config, storage, project, name, step) as session:
        return _train_grpo_step(session, groups, config)


def pass_shape(model: Any, config: TrainConfig, device: Any, longest: int = 0) -> tuple[int, int, bool, str]:
    """(tokens per forward pass, tokens per packed row, activation checkpointing, attention mode) of a step.

    `longest` is the step's longest sequence in tokens. Checkpointing left to None is on only where memory
    needs it: on CUDA when a pass without it would not fit the budget (memory.choose_checkpointing), on CPU
    when one sequence alone would keep more than memory.cpu_sequence_budget.

    >>> pass_shape(model, TrainConfig(), torch.device("cpu"))     # doctest: +SKIP
    (16384, 16384, False, 'segments')
    """
    attention = choose_attention(config.packed_attention, device.type)
    dtype_bytes = next(model.parameters()).element_size()
    budget = None
    checkpointing = config.gradient_checkpointing
    if checkpointing is None:
        checkpointing = False
        full = model_per_token_bytes(model.config, dtype_bytes, checkpointing=False)
        if device.type == "cuda":
            budget = activation_budget(device, config.memory_budget_gib)
            checkpointing = choose_checkpointing(budget, full, longest, config.tokens_per_forward)
        else:
            checkpointing = longest * SAFETY * full > cpu_sequence_budget()
    per_pass = config.tokens_per_forward
    if per_pass is None:
        per_token = model_per_token_bytes(model.config, dtype_bytes, checkpointing)
        if budget is None:
            budget = activation_budget(device, config.memory_budget_gib)
        per_pass = tokens_per_pass(budget, per_token)
    per_row = config.tokens_per_row
    if per_row is None:
        # Without a dense mask a row costs what its segments cost: one row per pass, no padding at all.
        per_row = per_pass if attention != "mask" else max(512, 4 * int(getattr(model.config, "hidden_size", 128)))
    return per_pass, per_row, checkpointing, attention


def _train_grpo_step(session: TrainerSession, groups: list[TrajectoryGroup], config: TrainConfig) -> TrainResult:
    import torch

    model, device, step = session.model, session.device, session.step
    project, name = session.project, session.name
    max_len = config.max_seq_len or int(getattr(model.config, "max_position_embeddings", 1 << 30))
    seqs, counts = prepare_sequences(groups, session.tokenizer, config, max_len)
    longest = max((len(s) for s in seqs), default=0)
    tokens_per_forward, tokens_per_row, checkpointing, attention = pass_shape(model, config, device, longest)
    session.set_checkpointing(checkpointing)
    pad_id = session.tokenizer.pad_token_id or 0
    skipped_reasons = counts.pop("skipped_reasons")

    metrics: dict[str, Any] = {
        **counts,
        "loss": 0.0,
        "clip_fraction": 0.0,
        "kl_to_sampler": 0.0,
        "entropy": 0.0,
        "grad_norm": 0.0,
        "optimizer_steps": 0,  # AdamW steps taken: one per mini-batch (TrainConfig.num_optimizer_steps)
        "update_norm": 0.0,  # L2 norm of the adapter's change over the step: how far the policy moved
        "trainable_tokens": 0,
        "tokens": 0,  # tokens of the trained sequences, each counted whole (tokens_in_batch)
        "tokens_in_batch": 0,
        "tokens_computed": 0,  # what the passes computed: a group's shared prefix once (prefixes.py)
        "trained_trajectories": len(seqs),
        "learning_rate": config.learning_rate,
        "tokens_per_pass": tokens_per_forward,
        "tokens_per_row": tokens_per_row,
        "passes": 0,
        "peak_memory_gib": 0.0,
        "gradient_checkpointing": int(checkpointing),
        "bf16": int(next(model.parameters()).dtype == torch.bfloat16),  # precision.py: the dtype 'auto' chose
    }
    if config.beta > 0:
        metrics["kl"] = 0.0
    metrics.update(option_metrics_start(config, seqs))
    if not seqs:
        why = "; ".join(skipped_reasons) or "no trajectories were given"
        metrics["nothing_trained_reason"] = f"no group had a reward signal ({why})"
        log.warning("step %d of %s/%s trains nothing: %s", step, project, name, metrics["nothing_trained_reason"])
    else:
        fresh = dict(metrics)
        passes_started = time.time()
        for attempt in range(2):  # a second try only after running out of CUDA memory without checkpointing
            try:
                with (
                    packed_attention(model, attention),
                    fused_lora(model, config.experimental_fused_lora),
                    PeakMemory(device) as peak,
                ):
                    run_passes(
                        model,
                        session.optimizer,
                        seqs,
                        config,
                        step,
                        metrics,
                        tokens_per_row,
                        tokens_per_forward,
                        attention,
                        pad_id,
                    )
                break
            except Exception as exc:
                # Only a pass sized by the defaults without checkpointing is retried; the traceback is let go
                # first (it holds the activations), then the step reruns from checkpoint `step`.
                if attempt or checkpointing or config.gradient_checkpointing is not None or not _is_oom(exc):
                    raise
                if distributed.current() is not None:
                    raise  # one rank rerunning alone would leave the others waiting in a collective
            log.warning(
                "step %d of %s/%s ran out of CUDA memory without activation checkpointing (%d tokens a pass); "
                "rerunning it with checkpointing (set TrainConfig.memory_budget_gib lower to size passes for "
                "what else shares the GPU)",
                step,
                project,
                name,
                tokens_per_forward,
            )
            session.rewind()  # checkpoint `step` back: an optimizer step may have run before the failure
            retry = config.model_copy(update={"gradient_checkpointing": True})
            tokens_per_forward, tokens_per_row, checkpointing, attention = pass_shape(model, retry, device, longest)
            session.set_checkpointing(checkpointing)
            metrics = {**fresh, "tokens_per_pass": tokens_per_forward, "tokens_per_row": tokens_per_row}
            metrics.update(gradient_checkpointing=1, out_of_memory_retries=1)
        metrics["peak_memory_gib"] = round(peak.gib, 3)
        metrics["passes_seconds"] = time.time() - passes_started  # the step less loading, tokenizing and saving
    metrics["seconds"] = time.time() - session.started
    info = {"step": step + 1, "base_model": session.base_model, "config": config.model_dump(), "metrics": metrics}
    path = session.save(info)
    metrics["seconds"] = time.time() - session.started  # including the checkpoint write
    return TrainResult(step=step + 1, metrics=metrics, checkpoint_path=path)


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError)


def tree_tokens(model: Any, config: TrainConfig, tokens_per_row: int, longest: int) -> int:
    """Tokens one shared-prefix tree may hold (prefixes.py). With rows and passes sized by default, what the
    memory allows one row at the step's checkpointing: the activation budget on CUDA (passes stop at
    memory.MAX_TOKENS because larger ones run no faster, but a group split over two rows computes its prefix
    twice), memory.cpu_sequence_budget on CPU (a pass holds one whole sequence whatever its 1 GiB budget).
    Else a packed row. A tree larger than a row gets a row (and a pass) of its own, as a long sequence does.

    >>> tree_tokens(model, TrainConfig(tokens_per_row=2048), 2048, 900)       # doctest: +SKIP
    2048
    """
    if config.tokens_per_row is not None or config.tokens_per_forward is not None:
        return tokens_per_row
    param = next(model.parameters())
    checkpointing = bool(model.get_base_model().is_gradient_checkpointing)
    per_token = model_per_token_bytes(model.config, param.element_size(), checkpointing)
    if param.device.type == "cpu":
        budget = cpu_sequence_budget()
    else:
        budget = activation_budget(param.device, config.memory_budget_gib)
    return max(tokens_per_row, longest, int(budget / (SAFETY * per_token)))


def prefix_sharing_off_reason(config: TrainConfig, attention: str) -> str | None:
    """Why a step packs whole sequences instead of sharing its groups' prefixes (prefixes.py); None: it shares.

    >>> prefix_sharing_off_reason(TrainConfig(), "segments") is None
    True
    """
    if not config.share_prefixes:
        return "TrainConfig.share_prefixes is False"
    if attention == "mask":
        return (
            "packed_attention 'mask' takes transformers' mask, built from restarting position ids, which cannot "
            "let several suffixes attend to one prefix; use 'auto'"
        )
    if config.lora_dropout > 0:
        return "lora_dropout > 0 would draw one dropout mask for a shared prefix instead of one per sequence"
    return None


def run_passes(
    model, optimizer, seqs, config, step, metrics, tokens_per_row, tokens_per_forward, attention, pad_id
) -> None:
    """Mini-batches of packed passes: forward, loss, backward per pass, one optimizer step per mini-batch."""
    import torch

    ranks = distributed.current()  # None: one process trains every sequence
    device = next(model.parameters()).device
    chunk = config.logit_chunk_tokens
    rng = random.Random(config.seed * 100003 + step)
    order = list(range(len(seqs)))
    rng.shuffle(order)
    n_batches = min(config.num_optimizer_steps, len(seqs))
    batches = [[seqs[i] for i in order[b::n_batches]] for b in range(n_batches)]
    total = LossStats()
    entropy_sum, kl_ref_sum, grad_norms, losses = 0.0, 0.0, [], []
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]  # the adapter as the step found it: what the step moved
    off_reason = prefix_sharing_off_reason(config, attention)
    packed = []
    for batch in batches:
        # Weights over the whole mini-batch, on every rank: the ranks' losses then add up to the step's.
        weights = AGGREGATIONS[config.aggregation]([s.num_trainable for s in batch])
        if ranks is not None:
            mine = rank_share_of(batch, ranks)
            batch, weights = [batch[i] for i in mine], [weights[i] for i in mine]
        packed.append(
            pack_sequences(
                batch,
                weights,
                tokens_per_row,
                device,
                tokens_per_forward,
                pad_id,
                share_prefixes=off_reason is None,
                tree_tokens=tree_tokens(model, config, tokens_per_row, max(len(s) for s in batch)),
            )
            if batch
            else []
        )
    parts_of_step = [part for parts in packed for part in parts]
    metrics["tokens_in_batch"] = sum(part.in_batch_tokens for part in parts_of_step)
    metrics["tokens_computed"] = sum(part.real_tokens for part in parts_of_step)
    metrics["shared_prefixes"] = sum(part.shared_prefixes for part in parts_of_step)
    if off_reason is not None:
        metrics["prefix_sharing_off_reason"] = off_reason
    if ranks is not None and fsdp.is_sharded(model):
        # Each pass gathers a sharded base's layers from every rank: all ranks run the busiest rank's pass count.
        idle = pack_sequences([min(seqs, key=len)], [0.0], tokens_per_row, device, tokens_per_forward, pad_id)[0]
        metrics["idle_passes"] = fsdp.pad_to_lockstep(packed, idle, device)
        metrics["sharded_base"] = 1
    if config.old_logprobs == "recompute":
        # Score every part with the policy as it is before this step's first update.
        with torch.no_grad():
            for parts in packed:
                for part in parts:
                    part.sampler_logprobs = part.old_logprobs  # truncated IS compares the two
                    part.old_logprobs = batch_logprobs(model, part, attention=attention, chunk_tokens=chunk)[0]
    for parts in packed:
        optimizer.zero_grad(set_to_none=True)
        batch_loss = 0.0
        for part in parts:
            ref = None
            if config.beta > 0:
                with torch.no_grad(), reference_policy(model, config.kl_ref_adapter_path):
                    ref, _ = batch_logprobs(model, part, attention=attention, chunk_tokens=chunk)
            new, entropy = batch_logprobs(
                model, part, with_entropy=config.experimental_compute_entropy, attention=attention, chunk_tokens=chunk
            )
            loss, stats = grpo_loss(
                config.loss,
                new,
                part.old_logprobs,
                part.advantages,
                part.weights,
                epsilon=config.epsilon,
                epsilon_high=config.clip_high,
                beta=config.beta,
                ref_logprobs=ref,
                seq=part.seq,
                importance_sampling_level=config.importance_sampling_level,
                truncated_importance_sampling=config.truncated_importance_sampling,
                sampler_logprobs=part.sampler_logprobs,
                kimi_k2_tau=config.kimi_k2_tau,
            )
            loss.backward()  # passes accumulate: the weights already normalise over the whole mini-batch
            batch_loss += stats.loss
            total.add(stats)
            kl_ref_sum += stats.kl
            with torch.no_grad():
                metrics["kl_to_sampler"] += float(sampler_kl(part.old_logprobs, new.detach()).sum())
            if entropy is not None:
                entropy_sum += float(entropy.sum())
            metrics["tokens"] += part.in_batch_tokens  # the step's sequences, whole: the work a step delivers
            metrics["passes"] += 1
        if ranks is not None:
            distributed.all_reduce_gradients(params)  # summed before clipping: every rank clips the same norm
        norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or float("inf"))
        grad_norms.append(float(norm))
        optimizer.step()
        losses.append(batch_loss)
    if ranks is not None:
        entropy_sum, kl_ref_sum, losses = _sum_over_ranks(total, metrics, entropy_sum, kl_ref_sum, losses)
        metrics["ranks"] = ranks.world
    n = max(total.tokens, 1)
    with torch.no_grad():  # LoRA weights are whole on every rank (fsdp.py), so this is the global norm
        moved = sum(float((p.detach().float() - b.float()).square().sum()) for p, b in zip(params, before))
    metrics.update(
        update_norm=math.sqrt(moved),
        loss=sum(losses) / len(losses),
        clip_fraction=total.clipped / n,
        kl_to_sampler=metrics["kl_to_sampler"] / n,
        entropy=entropy_sum / n,
        grad_norm=sum(grad_norms) / len(grad_norms),
        optimizer_steps=len(grad_norms),
        trainable_tokens=total.tokens,
        ratio_mean=total.ratio / n,
    )
    if config.beta > 0:
        metrics["kl"] = kl_ref_sum / n
    metrics.update(option_metrics_end(config, total))


# Per-rank counts of a data-parallel step, summed so the step's metrics are the 1-process step's.
_RANK_SUMMED = ("kl_to_sampler", "tokens", "passes", "tokens_in_batch", "tokens_computed", "shared_prefixes")


def rank_share_of(batch: list[TokenizedTrajectory], ranks: Any) -> list[int]:
    """Indices of the mini-batch's sequences this rank trains (distributed.rank_share, by token count)."""
    return distributed.rank_share([len(s) for s in batch], [s.group_index for s in batch], ranks.world)[ranks.rank]


def _like(old: Any, value: float) -> Any:
    return round(value) if isinstance(old, int) else value


def _sum_over_ranks(total: LossStats, metrics: dict, entropy_sum: float, kl_ref_sum: float, losses: list[float]):
    """Sum a data-parallel step's statistics over ranks, in one collective; returns (entropy, kl_ref, losses)."""
    fields = list(total.__dataclass_fields__)
    values = [float(getattr(total, f)) for f in fields] + [float(metrics[k]) for k in _RANK_SUMMED]
    summed = distributed.all_reduce_sums([*values, entropy_sum, kl_ref_sum, *losses])
    for i, f in enumerate(fields):
        setattr(total, f, _like(getattr(total, f), summed[i]))
    for j, k in enumerate(_RANK_SUMMED):
        metrics[k] = _like(metrics[k], summed[len(fields) + j])
    rest = summed[len(values) :]
    return rest[0], rest[1], rest[2:]
