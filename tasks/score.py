"""Prefect task: score a step's groups with the environment's reward, or rescore them with RULER.

Without a judge the environment's rewards stand and the gathered file is passed on as it is. With a
judge each group is sent to RULER once and the rescored groups are written next to the gathered ones
(`{step:04d}.scored.jsonl`). A judge that fails (no key, unreachable) fails the task loudly; the
gathered trajectories stay in storage and in the cache, so the next run scores them without rolling out.
"""

from __future__ import annotations

import asyncio
import time

from prefect import get_run_logger, task

from art_core.rollouts import reward_summary
from art_core.storage import Storage
from tasks._async import run_sync
from tasks.results import cached_on
from tasks.specs import JudgeConfig, ScoreResult


class JudgeError(RuntimeError):
    """The judge could not score a group; the message says what to fix and where the trajectories are."""


@task(name="score_groups", task_run_name="score step {step}", cache_policy=cached_on(), persist_result=True)
def score_groups(storage_url: str, trajectories_uri: str, step: int, judge: JudgeConfig | None = None) -> ScoreResult:
    """Rewards for one step's groups; RULER's relative scores when a judge is configured."""
    t0 = time.perf_counter()
    storage = Storage(storage_url)
    groups = storage.read_groups(trajectories_uri)
    if judge is None:
        return ScoreResult(step=step, uri=trajectories_uri, summary=reward_summary(groups), judged=False,
                           seconds=time.perf_counter() - t0)  # fmt: skip
    try:
        scored = run_sync(_ruler_all(groups, judge, storage_url))
    except Exception as e:  # re-raised with what to fix; never scored as 0
        raise JudgeError(
            f"RULER judge {judge.model!r} at {judge.api_base or 'the provider default'} failed on step {step}: "
            f"{type(e).__name__}: {e}. Check the judge's address and its key (ART_JUDGE_API_KEY). The gathered "
            f"trajectories are kept at {trajectories_uri}; run again and they are scored without rolling out."
        ) from e
    uri = trajectories_uri.removesuffix(".jsonl") + ".scored.jsonl"
    storage.write_groups(uri, scored)
    summary = reward_summary(scored)
    get_run_logger().info("step %d: RULER mean score %.3f -> %s", step, summary["reward"], uri)
    return ScoreResult(step=step, uri=uri, summary=summary, judged=True, seconds=time.perf_counter() - t0)


async def _ruler_all(groups, judge: JudgeConfig, storage_url: str):
    from art_core.rewards.ruler import ruler_score_group
    from art_core.settings import get_settings

    params: dict = dict(judge.litellm_params)
    if judge.api_base:
        params["api_base"] = judge.api_base
    key = get_settings().judge_api_key  # read here, never a parameter: Prefect stores parameters
    if key is not None:
        params["api_key"] = key.get_secret_value()
    options = judge.model_dump(include={"timeout_s", "max_retries", "combine", "ruler_weight", "explanation_max_chars"})
    options["cache_root"] = storage_url
    return await asyncio.gather(
        *(ruler_score_group(g, judge.model, extra_litellm_params=params, rubric=judge.rubric, **options) for g in groups)
    )
