"""Supervised fine-tuning of the same LoRA adapter GRPO trains: chat conversations in, checkpoint step + 1 out.

ART's `TrainSFTConfig` (learning_rate, one value or one per batch; batch_size; assistant_turns) and its
data: conversations of OpenAI chat messages, optional tools, ending with an assistant message. Only the
assistant's tokens carry loss (mean negative log-likelihood over them); system, user and tool messages
and the template's markup are context.

    result = sft_step(base_model="/models/tiny", trajectories=trajs, config=TrainSFTConfig(learning_rate=1e-3),
                      train_config=TrainConfig(), storage=Storage("./.art"), project="demo", name="agent", step=0)
    result.step      # 1: checkpoints/0001 holds the adapter; GRPO continues from it (same LoRA, same numbering)

How assistant tokens are found: for assistant message i, the template renders messages[:i] with the
generation prompt and messages[:i+1] without it; what the second adds to the first is the assistant's
turn (its content, tool calls and end-of-turn token). Each piece is tokenized on its own and laid end to
end, so the trained ids are exactly the template's rendering of the assistant turn. The template must be
prefix-preserving (tokenize.check_prefix_preserving's rule), or the turns cannot be cut apart.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from art_core.progress import progress_bar
from art_core.storage import Storage
from art_core.training import distributed, fsdp
from art_core.training.attention import packed_attention
from art_core.training.config import TrainConfig
from art_core.training.fused_lora import fused_lora
from art_core.training.packing import batch_logprobs, pack_sequences
from art_core.training.result import TrainResult
from art_core.training.session import TrainerSession, trainer_session
from art_core.training.tokenize import ChatTemplateError, TokenizedTrajectory, TrajectoryError, render
from art_core.training.trainer import pass_shape, prefix_sharing_off_reason, rank_share_of, tree_tokens
from art_core.trajectories import Trajectory


class TrainSFTConfig(BaseModel):
    """ART's SFT settings (`art.TrainSFTConfig`). LoRA shape, optimizer betas and dtype come from TrainConfig,
    so SFT and GRPO train one adapter."""

    model_config = ConfigDict(extra="forbid")

    learning_rate: float | list[float] = Field(
        5e-5, description="AdamW learning rate (ART 5e-5), or one per batch (a schedule, e.g. from the file helper)."
    )
    batch_size: int | Literal["auto"] = Field(
        "auto", description="Conversations per optimizer step; 'auto' is 8 (ART sizes it from memory)."
    )
    assistant_turns: Literal["all", "last"] = Field(
        "all", description="Train every assistant message, or only the last one (earlier ones stay context)."
    )

    def batch_sizes(self, n: int) -> list[int]:
        """How `n` conversations split into batches, in order.

        >>> TrainSFTConfig(batch_size=3).batch_sizes(7)
        [3, 3, 1]
        """
        size = 8 if self.batch_size == "auto" else int(self.batch_size)
        if size < 1:
            raise ValueError(f"batch_size must be >= 1 or 'auto', got {self.batch_size}")
        return [min(size, n - i) for i in range(0, n, size)]

    def rates(self, n_batches: int) -> list[float]:
        """The learning rate of each batch; a list must have one value per batch."""
        if isinstance(self.learning_rate, list):
            if len(self.learning_rate) != n_batches:
                raise ValueError(
                    f"learning_rate has {len(self.learning_rate)} values for {n_batches} batches: give one per "
                    "batch of batch_size conversations, or a single number"
                )
            return [float(x) for x in self.learning_rate]
        return [float(self.learning_rate)] * n_batches


def tokenize_sft(
    messages: list[dict],
    tools: list | None,
    tokenizer: Any,
    *,
    assistant_turns: str = "all",
    index: int = 0,
    max_seq_len: int | None = None,
) -> TokenizedTrajectory:
    """A conversation as tokens with `trainable` True exactly on the assistant turns' tokens (see module doc).

    >>> seq = tokenize_sft([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], None, tok)  # doctest: +SKIP
    >>> tok.decode([t for t, m in zip(seq.input_ids, seq.trainable) if m])                                         # doctest: +SKIP
    'yo<|im_end|>'
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise TrajectoryError(
            0,
            index,
            "the conversation does not end with an assistant message",
            "End each SFT example with the assistant reply to learn",
        )
    messages = [_arguments_as_objects(m) for m in messages]
    targets = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if assistant_turns == "last":
        targets = targets[-1:]
    ids: list[int] = []
    trainable: list[bool] = []
    done = ""  # the text laid down so far
    for i in targets:
        prompt = render(tokenizer, messages[:i], tools, True)
        full = render(tokenizer, messages[: i + 1], tools, False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ChatTemplateError(
                f"the chat template is not prefix-preserving around assistant message {i} of example {index}: the "
                "prompt before it is not a prefix of the conversation after it, so its tokens cannot be cut out"
            )
        # The turn ends at its end-of-turn token; the newline the template writes after it is context.
        reply = full[len(prompt) :]
        kept = reply.rstrip("\n")
        for text, train in ((prompt[len(done) :], False), (kept, True)):
            piece = tokenizer.encode(text, add_special_tokens=False) if text else []
            ids += piece
            trainable += [train] * len(piece)
        done = prompt + kept
    if not any(trainable):
        raise TrajectoryError(0, index, "its assistant messages render to no tokens", "Give the assistant content")
    if max_seq_len is not None and len(ids) > max_seq_len:
        raise TrajectoryError(
            0,
            index,
            f"it is {len(ids)} tokens long, more than max_seq_len {max_seq_len}",
            "Shorten the example or raise TrainConfig.max_seq_len",
        )
    return TokenizedTrajectory(
        group_index=0, trajectory_index=index, input_ids=ids, trainable=trainable, old_logprobs=[math.nan] * len(ids)
    )


def _arguments_as_objects(message: dict) -> dict:
    """OpenAI tool calls carry arguments as a JSON string; templates such as Qwen2.5's write `arguments | tojson`,
    which would train the model to emit a quoted string where its parser (hermes) expects an object."""
    import json

    calls = message.get("tool_calls")
    if not calls:
        return message
    out = []
    for call in calls:
        fn = dict(call.get("function") or {})
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.loads(fn["arguments"])
            except json.JSONDecodeError:
                pass  # not JSON: the template renders it as given
        out.append({**call, "function": fn})
    return {**message, "tool_calls": out}


def sft_step(
    *,
    base_model: str,
    trajectories: list[Trajectory],
    config: TrainSFTConfig,
    train_config: TrainConfig,
    storage: Storage,
    project: str,
    name: str,
    step: int,
) -> TrainResult:
    """Train checkpoint `step` -> `step + 1` on the conversations, one optimizer step per batch, in order."""
    if not trajectories:
        raise ValueError("no SFT examples were given: pass conversations that end with an assistant message")
    if train_config.ranks > 1 and distributed.current() is None:  # data parallel: each rank a share of a batch
        kwargs = dict(
            base_model=base_model,
            trajectories=trajectories,
            config=config,
            train_config=train_config,
            storage=storage,
            project=project,
            name=name,
            step=step,
        )
        return distributed.step_on_ranks("art_core.training.sft.sft_step", train_config, kwargs)
    with trainer_session(base_model, train_config, storage, project, name, step) as session:
        return _sft_step(session, trajectories, config)


def _sft_step(session: TrainerSession, trajectories: list[Trajectory], config: TrainSFTConfig) -> TrainResult:
    import torch

    model, tok, train_config = session.model, session.tokenizer, session.config
    max_len = train_config.max_seq_len or int(getattr(model.config, "max_position_embeddings", 1 << 30))
    seqs = [
        tokenize_sft(t.messages(), t.tools, tok, assistant_turns=config.assistant_turns, index=i, max_seq_len=max_len)
        for i, t in enumerate(trajectories)
    ]
    per_pass, per_row, checkpointing, attention = pass_shape(
        model, train_config, next(model.parameters()).device, max((len(s) for s in seqs), default=0)
    )
    session.set_checkpointing(checkpointing)
    # A batch's conversations share their system prompt and tool list (every example is group 0): computed
    # once per row, as a GRPO group's prompt is (prefixes.py), with the same loss and gradients.
    share = prefix_sharing_off_reason(train_config, attention) is None
    longest = max((len(s) for s in seqs), default=0)
    tree_size = tree_tokens(model, train_config, per_row, longest)
    sizes = config.batch_sizes(len(seqs))
    rates = config.rates(len(sizes))
    params = [p for p in model.parameters() if p.requires_grad]
    losses, tokens, start, computed, in_batch = [], 0, 0, 0, 0
    ranks = distributed.current()  # None: one process trains every conversation
    sharded = ranks is not None and fsdp.is_sharded(model)
    if sharded:  # a pass over one short conversation with no trained token, for a rank short of passes
        idle = pack_sequences([min(seqs, key=len)], [0.0], per_row, session.device, per_pass, tok.pad_token_id or 0)[0]
    # An epoch of long conversations on a CPU runs for many minutes: say how far it is (a line every 30 s
    # off a terminal, art_core.progress), as a gather does.
    bar = progress_bar(len(seqs), f"SFT {session.name} step {session.step + 1}", unit="conversation")
    with packed_attention(model, attention), fused_lora(model, train_config.experimental_fused_lora):
        for size, lr in zip(sizes, rates):
            batch = seqs[start : start + size]
            start += size
            total = sum(s.num_trainable for s in batch)
            session.set_hyperparameters(learning_rate=lr)  # the schedule's rate for this batch
            optimizer = session.optimizer
            optimizer.zero_grad(set_to_none=True)
            batch_loss = 0.0
            if ranks is not None:  # this rank's share, weighted over the whole batch: the ranks' losses add up
                batch = [batch[i] for i in rank_share_of(batch, ranks)]
            parts = (
                pack_sequences(
                    batch,
                    [1.0 / total] * len(batch),
                    per_row,
                    session.device,
                    per_pass,
                    tok.pad_token_id or 0,
                    share_prefixes=share,
                    tree_tokens=tree_size,
                )
                if batch
                else []
            )
            if sharded:  # every pass gathers the base's layers from all ranks: run as many as the busiest rank
                fsdp.pad_to_lockstep([parts], idle, session.device)
            computed += sum(part.real_tokens for part in parts)
            in_batch += sum(part.in_batch_tokens for part in parts)
            for part in parts:
                logp, _ = batch_logprobs(model, part, attention=attention, chunk_tokens=train_config.logit_chunk_tokens)
                loss = -(logp * part.weights).sum()  # mean NLL over the batch's assistant tokens
                loss.backward()
                batch_loss += float(loss.detach())
            if ranks is not None:
                distributed.all_reduce_gradients(params)  # summed before clipping: every rank clips the same norm
                (batch_loss,) = distributed.all_reduce_sums([batch_loss])
            torch.nn.utils.clip_grad_norm_(params, train_config.max_grad_norm or float("inf"))
            optimizer.step()
            losses.append(batch_loss)
            tokens += total
            bar.set_postfix({"loss": f"{batch_loss:.4f}", "lr": f"{lr:.2e}"}, refresh=False)
            bar.update(size)
    bar.close()
    if ranks is not None:
        computed, in_batch = (int(v) for v in distributed.all_reduce_sums([computed, in_batch]))
    metrics = {
        "loss": sum(losses) / len(losses),
        "loss_last": losses[-1],
        "examples": len(seqs),
        "batches": len(sizes),
        "trainable_tokens": tokens,
        "tokens_in_batch": in_batch,  # the conversations' tokens, whole
        "tokens_computed": computed,  # what the passes computed: shared prefixes once
        "learning_rate": rates[-1],
        **({"ranks": ranks.world} if ranks is not None else {}),
        **({"sharded_base": 1} if sharded else {}),
    }
    metrics["seconds"] = time.time() - session.started
    info = {
        "step": session.step + 1,
        "base_model": session.base_model,
        "kind": "sft",
        "config": train_config.model_dump(),
        "sft_config": config.model_dump(),
        "metrics": metrics,
    }
    return TrainResult(step=session.step + 1, metrics=metrics, checkpoint_path=session.save(info))
