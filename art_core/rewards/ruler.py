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
from typing import Any, Literal, Sequence

from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, Field

from art_core.rewards.accounting import JudgeUsage
from art_core.rewards.cache import JudgeCache
from art_core.rewards.judge import JudgeError, call_judge, reply_model
from art_core.rewards.render import judge_messages, render_messages, render_tools
from art_core.trajectories import Message, Tools, Trajectory, TrajectoryGroup, choice_to_message

log = logging.getLogger(__name__)

DEFAULT_RUBRIC = """\
- An attempt that achieves what the user asked for scores far above one that does not, however \
polished the failing attempt reads.
- Rules the agent was given (system prompt, policy) count: breaking one costs heavily, even when \
the goal is reached.
- Among attempts that succeed, prefer the one that gets there with fewer wasted steps, fewer \
errors and no needless or repeated tool calls.
- Partial progress earns partial credit: an attempt that got further toward the goal beats one \
that did not start.
- Let the gaps between scores mirror the gaps in quality: attempts of about equal quality get \
about equal scores."""

# What every trajectory gets when all of a group's trajectories are identical: no judge is asked,
# since equal scores carry no GRPO signal whatever their value.
IDENTICAL_SCORE = 0.5


class RulerConfig(BaseModel):
    """How RULER judges. Every field can also be passed to `ruler`/`ruler_score_group` as a keyword."""

    model_config = ConfigDict(extra="forbid")

    judge_model: str | None = Field(None, description="litellm model name; None reads ART_JUDGE_MODEL")
    rubric: str = Field(DEFAULT_RUBRIC, description="what makes an attempt better, in plain words")
    extra_litellm_params: dict[str, Any] = Field(
        default_factory=dict, description="passed to litellm.acompletion: api_base, api_key, temperature, max_tokens..."
    )
    max_retries: int = Field(3, ge=0, description="attempts after the first on a transient or malformed reply")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay; doubles on each further retry")
    timeout_s: float = Field(120.0, gt=0, description="seconds one judge request may take")
    max_concurrency: int = Field(8, ge=1, description="judge requests in flight at once per endpoint and model")
    explanation_max_chars: int | None = Field(
        None, ge=1, description="schema maxLength of each explanation: set it for small self-hosted judges"
    )
    cache: bool = Field(True, description="reuse stored replies for identical requests")
    cache_root: str | None = Field(None, description="storage root for the cache; None reads ART_STORAGE_ROOT")
    combine: Literal["ruler", "weighted"] = Field(
        "ruler", description="'ruler': reward = judge score; 'weighted': a weighted sum with the previous reward"
    )
    ruler_weight: float = Field(0.5, ge=0, le=1, description="with combine='weighted', the judge score's weight")


class TrajectoryScore(BaseModel):
    """The judge's verdict on one trajectory; `trajectory_id` is "trajectory_{position + 1}"."""

    trajectory_id: str
    explanation: str
    score: float = Field(ge=0.0, le=1.0)


class RulerResult(BaseModel):
    """Scores in input order, plus what judging them cost."""

    scores: list[TrajectoryScore]
    usage: JudgeUsage


def _resolve(judge_model: str | None, extra_litellm_params: dict[str, Any] | None, rubric: str | None, config: RulerConfig | None, options: dict[str, Any]) -> RulerConfig:
    """One RulerConfig from explicit arguments, a config and keyword options, judge filled from settings."""
    from art_core.settings import get_settings

    base = (config or RulerConfig()).model_dump()
    unknown = set(options) - set(RulerConfig.model_fields)
    if unknown:
        raise TypeError(f"unknown RULER option(s) {sorted(unknown)}; valid ones: {sorted(RulerConfig.model_fields)}")
    base.update(options)
    if judge_model is not None:
        base["judge_model"] = judge_model
    if extra_litellm_params is not None:
        base["extra_litellm_params"] = dict(extra_litellm_params)
    if rubric is not None:
        base["rubric"] = rubric
    cfg = RulerConfig.model_validate(base)
    settings = get_settings()
    if cfg.judge_model is None:
        if not settings.judge_model:
            raise ValueError("no RULER judge model: pass judge_model='openai/...' or set ART_JUDGE_MODEL")
        cfg.judge_model = settings.judge_model
        # The settings' endpoint belongs to the settings' judge; an explicit judge brings its own.
        params = dict(cfg.extra_litellm_params)
        if settings.judge_api_base and "api_base" not in params:
            params["api_base"] = settings.judge_api_base
        if settings.judge_api_key and "api_key" not in params:
            params["api_key"] = settings.judge_api_key.get_secret_value()
        cfg.extra_litellm_params = params
    if cfg.cache and cfg.cache_root is None:
        cfg.cache_root = settings.storage_root
    return cfg


def _as_messages(item: Trajectory | Sequence[Message | Choice]) -> list[Message]:
    if isinstance(item, Trajectory):
        return item.messages()
    return [choice_to_message(m) if isinstance(m, Choice) else m for m in item]


async def judge_trajectories(
    message_lists: Sequence[Trajectory | Sequence[Message | Choice]],
    config: RulerConfig,
    tools: Sequence[Tools | None] | None = None,
) -> RulerResult:
    """Score trajectories relative to each other with a resolved config (see `ruler` for the short form)."""
    if config.judge_model is None:
        raise ValueError("RulerConfig.judge_model is None: resolve the config with ruler()/ruler_score_group()")
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
    messages = judge_messages([rendered[i] for i in unique], sent_ids, config.rubric, [tools[i] for i in unique])
    response_model = reply_model(sent_ids, config.explanation_max_chars)
    cache = key = None
    if config.cache:
        from art_core.storage import Storage

        cache = JudgeCache(Storage(config.cache_root or "./.art"))
        schema = response_model.model_json_schema()
        key = cache.key(config.judge_model, config.rubric, messages, schema, config.extra_litellm_params)
        record = cache.get(key)
        if record is not None and set(record["scores"]) == set(sent_ids):
            return RulerResult(scores=_map_back(record["scores"], ids, same_as), usage=JudgeUsage(cache_hits=1))

    verdicts, usage = await call_judge(
        messages,
        judge_model=config.judge_model,
        response_model=response_model,
        extra_litellm_params=config.extra_litellm_params,
        max_retries=config.max_retries,
        backoff_s=config.backoff_s,
        timeout_s=config.timeout_s,
        max_concurrency=config.max_concurrency,
    )
    if cache is not None and key is not None:
        try:
            cache.put(key, config.judge_model, verdicts, usage.model_dump())
        except Exception as exc:  # the scores are valid and paid for; a full disk must not lose them
            log.warning("could not store the RULER reply in the cache at %s: %s", cache.path(key), exc)
    return RulerResult(scores=_map_back(verdicts, ids, same_as), usage=usage)


def _map_back(verdicts: dict[str, dict[str, Any]], ids: list[str], same_as: list[int]) -> list[TrajectoryScore]:
    out = []
    for i, tid in enumerate(ids):
        v = verdicts[ids[same_as[i]]]
        note = "" if same_as[i] == i else f" (identical to {ids[same_as[i]]})"
        out.append(TrajectoryScore(trajectory_id=tid, explanation=str(v["explanation"]) + note, score=float(v["score"])))
    return out


async def ruler(
    message_lists: Sequence[Trajectory | Sequence[Message | Choice]],
    judge_model: str | None = None,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = None,
    *,
    tools: Sequence[Tools | None] | None = None,
    config: RulerConfig | None = None,
    **options: Any,
) -> list[TrajectoryScore]:
    """Score each conversation in [0, 1] relative to the others, with a short explanation each.

    message_lists: conversations (lists of chat messages or Choices) or Trajectories, all attempts
    at the same task. Options are RulerConfig's fields (max_retries, timeout_s, cache, ...).
    Raises JudgeError when the judge gives no usable reply within the allowed attempts.

        scores = await ruler([conv_a, conv_b], "openai/o4-mini")
        scores[0].score, scores[0].explanation
    """
    cfg = _resolve(judge_model, extra_litellm_params, rubric, config, options)
    return (await judge_trajectories(message_lists, cfg, tools)).scores


def combine_reward(score: float, independent_reward: float, config: RulerConfig) -> float:
    """The trajectory's new reward: the judge score, or ruler_weight * score + (1 - ruler_weight) * env reward.

    Keep the environment's reward on a scale like the judge's [0, 1] when weighting them.

        >>> combine_reward(1.0, 0.0, RulerConfig(combine="weighted", ruler_weight=0.75))
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
    config: RulerConfig | None = None,
    **options: Any,
) -> TrajectoryGroup | None:
    """A new group whose rewards are the judge's scores (the input group is left unchanged).

    Each trajectory keeps its previous reward in metrics["independent_reward"], the judge's score in
    metrics["ruler_score"] and the explanation in its logs; with combine="weighted" (and ruler_weight)
    the reward mixes both. The group's metrics gain judge_calls, judge_cache_hits, judge_retries,
    judge_prompt_tokens, judge_completion_tokens and judge_cost_usd.

    swallow_exceptions=True: if the judge fails, log why and return None, which
    gather_trajectory_groups' after_each takes as "drop this group"; other groups are untouched.

        scored = await ruler_score_group(group, "openai/o4-mini", combine="weighted", ruler_weight=0.8)
    """
    cfg = _resolve(judge_model, extra_litellm_params, rubric, config, options)  # config errors always raise
    try:
        result = await judge_trajectories(group.trajectories, cfg)
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
        trajectories.append(new)
    metrics = dict(group.metrics)
    for name, value in result.usage.as_metrics().items():
        metrics[name] = metrics.get(name, 0.0) + value  # a group scored twice reports both calls
    return TrajectoryGroup(
        trajectories, exceptions=list(group.exceptions), metadata=dict(group.metadata), metrics=metrics
    )
