"""RULER: an LLM judge scores the trajectories of a group relative to each other, through litellm.

No hand-written reward function: one judge call per group reads every attempt at the same scenario
and gives each a score in [0, 1] with a short explanation. GRPO only needs the scores' order and
gaps within a group, which is what a judge comparing attempts side by side gives best.

    from art_core.rewards import ruler_score_group
    groups = await gather_trajectory_groups(
        (TrajectoryGroup(rollout(model, s) for _ in range(8)) for s in batch),
        after_each=lambda g: ruler_score_group(g, "openai/o4-mini", swallow_exceptions=True),
    )

Any judge litellm reaches works: a hosted model with its key, or your own OpenAI-compatible server
(`judge_model="openai/<served name>"`, `extra_litellm_params={"api_base": ..., "api_key": ...}`).
Without arguments the judge comes from ART_JUDGE_MODEL / ART_JUDGE_API_BASE / ART_JUDGE_API_KEY.

What a call does: render each trajectory (tool calls and results included), drop exact duplicates
(identical attempts get identical scores without asking the judge to separate them), send the shared
beginning once, ask for a strict JSON-schema reply, check it, retry transient failures, and cache the
validated reply under the storage root (`{root}/_cache/ruler/`), so re-running a step never pays twice.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, Field

from art_core.rewards.accounting import JudgeUsage
from art_core.rewards.config import JudgeConfig, ResolvedJudge, resolve_judge
from art_core.rewards.judge import ask_judge, reply_model
from art_core.rewards.render import judge_messages, render_messages, render_tools
from art_core.trajectories import Message, Tools, Trajectory, TrajectoryGroup, choice_to_message

log = logging.getLogger(__name__)

# What every trajectory gets when all of a group's trajectories are identical: no judge is asked,
# since equal scores carry no GRPO signal whatever their value.
IDENTICAL_SCORE = 0.5


# The one judge configuration (art_core.rewards.config); RulerConfig is its older name here.
RulerConfig = JudgeConfig


class TrajectoryScore(BaseModel):
    """The judge's verdict on one trajectory; `trajectory_id` is "trajectory_{position + 1}"."""

    trajectory_id: str
    explanation: str
    score: float = Field(ge=0.0, le=1.0)


class RulerResult(BaseModel):
    """Scores in input order, plus what judging them cost."""

    scores: list[TrajectoryScore]
    usage: JudgeUsage


def _as_messages(item: Trajectory | Sequence[Message | Choice]) -> list[Message]:
    if isinstance(item, Trajectory):
        return item.messages()
    return [choice_to_message(m) if isinstance(m, Choice) else m for m in item]


async def judge_trajectories(
    message_lists: Sequence[Trajectory | Sequence[Message | Choice]],
    judge: ResolvedJudge,
    tools: Sequence[Tools | None] | None = None,
) -> RulerResult:
    """Score trajectories relative to each other with a resolved judge (`ruler` is the short form).

    result = await judge_trajectories([conv_a, conv_b], resolve_judge(JudgeConfig(model="openai/o4-mini")))
    """
    n = len(message_lists)
    if n == 0:
        return RulerResult(scores=[], usage=JudgeUsage())
    if tools is None:
        tools = [m.tools if isinstance(m, Trajectory) else None for m in message_lists]
    if len(tools) != n:
        raise ValueError(f"{n} trajectories but {len(tools)} tool lists")
    rendered = [render_messages(_as_messages(m)) for m in message_lists]
    ids = [f"trajectory_{i + 1}" for i in range(n)]

    # Identical attempts: judge the first of each kind only (the judge cannot separate them anyway).
    first_of: dict[tuple, int] = {}
    same_as = [first_of.setdefault((rendered[i], render_tools(tools[i])), i) for i in range(n)]
    unique = sorted(set(same_as))
    if len(unique) == 1:
        why = f"all {n} trajectories are identical: equal scores, no judge call"
        scores = [TrajectoryScore(trajectory_id=t, explanation=why, score=IDENTICAL_SCORE) for t in ids]
        return RulerResult(scores=scores, usage=JudgeUsage())

    sent_ids = [ids[i] for i in unique]
    rubric = judge.config.rubric_text
    messages = judge_messages([rendered[i] for i in unique], sent_ids, rubric, [tools[i] for i in unique])
    response_model = reply_model(sent_ids, judge.config.explanation_max_chars)
    verdicts, usage = await ask_judge(judge, messages, response_model, instructions=rubric)
    return RulerResult(scores=_map_back(verdicts, ids, same_as), usage=usage)


def _map_back(verdicts: dict[str, dict[str, Any]], ids: list[str], same_as: list[int]) -> list[TrajectoryScore]:
    out = []
    for i, tid in enumerate(ids):
        v = verdicts[ids[same_as[i]]]
        note = "" if same_as[i] == i else f" (identical to {ids[same_as[i]]})"
        out.append(
            TrajectoryScore(trajectory_id=tid, explanation=str(v["explanation"]) + note, score=float(v["score"]))
        )
    return out


async def ruler(
    message_lists: Sequence[Trajectory | Sequence[Message | Choice]],
    judge_model: str | None = None,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = None,
    *,
    tools: Sequence[Tools | None] | None = None,
    debug: bool = False,
    config: JudgeConfig | None = None,
    **options: Any,
) -> list[TrajectoryScore]:
    """Score each conversation in [0, 1] relative to the others, with a short explanation each.

    message_lists: conversations (lists of chat messages or Choices) or Trajectories, all attempts
    at the same task. Options are JudgeConfig's fields (max_retries, timeout_s, cache, ...) and cache_root.
    Raises JudgeError when the judge gives no usable reply within the allowed attempts.

        scores = await ruler([conv_a, conv_b], "openai/o4-mini")
        scores[0].score, scores[0].explanation
    """
    judge = resolve_judge(
        config, judge_model=judge_model, extra_litellm_params=extra_litellm_params, rubric=rubric, **options
    )
    scores = (await judge_trajectories(message_lists, judge, tools)).scores
    for s in scores if debug else []:
        print(f"[RULER] {s.trajectory_id}: {s.score:.3f} {s.explanation}")
    return scores


def combine_reward(score: float, independent_reward: float, config: JudgeConfig) -> float:
    """The trajectory's new reward: the judge score, or ruler_weight * score + (1 - ruler_weight) * env reward.

    Keep the environment's reward on a scale like the judge's [0, 1] when weighting them.

        >>> combine_reward(1.0, 0.0, JudgeConfig(combine="weighted", ruler_weight=0.75))
        0.75
    """
    if config.combine == "ruler":
        return score
    return config.ruler_weight * score + (1.0 - config.ruler_weight) * independent_reward


async def ruler_score_group(
    group: TrajectoryGroup,
    judge_model: str | None = None,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = None,
    *,
    swallow_exceptions: bool = False,
    debug: bool = False,
    config: JudgeConfig | None = None,
    **options: Any,
) -> TrajectoryGroup | None:
    """A new group whose rewards are the judge's scores (the input group is left unchanged).

    Each trajectory keeps its previous reward in metrics["independent_reward"], the judge's score in
    metrics["ruler_score"] and the explanation in its logs; with combine="weighted" (and ruler_weight)
    the reward mixes both. The group's metrics gain judge_calls, judge_cache_hits, judge_retries,
    judge_prompt_tokens, judge_completion_tokens and judge_cost_usd.

    swallow_exceptions=True: if the judge fails, log why and return None, which
    gather_trajectory_groups' after_each takes as "drop this group"; other groups are untouched.
    debug=True: print each verdict (score and explanation) as it comes back, as ART does.

        scored = await ruler_score_group(group, "openai/o4-mini", combine="weighted", ruler_weight=0.8)
    """
    judge = resolve_judge(  # a misconfiguration (unknown option, no judge) raises, swallowed or not
        config, judge_model=judge_model, extra_litellm_params=extra_litellm_params, rubric=rubric, **options
    )
    return await score_group(group, judge, swallow_exceptions=swallow_exceptions, debug=debug)


async def score_group(
    group: TrajectoryGroup, judge: ResolvedJudge, *, swallow_exceptions: bool = False, debug: bool = False
) -> TrajectoryGroup | None:
    """`ruler_score_group` with the judge resolved already (the scoring task resolves it once for a step).

    scored = await score_group(group, resolve_judge(JudgeConfig(model="openai/o4-mini")))
    """
    cfg = judge.config
    try:
        result = await judge_trajectories(group.trajectories, judge)
    except Exception as exc:
        if not swallow_exceptions:
            raise
        log.error("RULER dropped a group of %d trajectories (metadata %s): %s", len(group), group.metadata, exc)
        return None
    trajectories = []
    for old, verdict in zip(group.trajectories, result.scores):
        new = old.model_copy(deep=True)
        new.metrics["independent_reward"] = old.reward
        new.metrics["ruler_score"] = verdict.score
        new.reward = combine_reward(verdict.score, old.reward, cfg)
        new.log(f"RULER score {verdict.score:.3f}: {verdict.explanation}")
        if debug:
            print(f"[RULER] {verdict.trajectory_id}: {verdict.score:.3f} {verdict.explanation}")
        trajectories.append(new)
    metrics = dict(group.metrics)
    for name, value in result.usage.as_metrics().items():
        metrics[name] = metrics.get(name, 0.0) + value  # a group scored twice reports both calls
    return TrajectoryGroup(
        trajectories, exceptions=list(group.exceptions), metadata=dict(group.metadata), metrics=metrics
    )
