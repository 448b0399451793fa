"""Prefect task: rescore a step's gathered groups with RULER, one judge call per group.

Only a run with a judge scores: without one the environment's rewards stand and the train flow runs no
score task at all (a task run per step costs a cached re-run about 10 ms), passing the gathered file on
as it is. The rescored groups are written next to the gathered ones (`{step:04d}.scored.jsonl`). A judge
that fails (no key, unreachable) fails the task loudly; the gathered trajectories stay in storage and in
the cache, so the next run scores them without rolling out.
The cache keys on the gathered file's fingerprint: rollouts gathered again are scored again.
"""

from __future__ import annotations

import asyncio
import time

from prefect import get_run_logger, task

from art_core.coroutines import run_sync
from art_core.rewards.config import JudgeConfig, ResolvedJudge, resolve_judge
from art_core.rewards.judge import JudgeError
from art_core.rollouts import reward_summary
from art_core.store import ModelRef
from art_pipeline.tasks.results import cached_on, step_run_name
from art_pipeline.tasks.specs import ScoreResult


@task(name="score_groups", task_run_name=step_run_name("score"), cache_policy=cached_on(), persist_result=True)
def score_groups(ref: ModelRef, trajectories_uri: str, fingerprint: str, step: int, judge: JudgeConfig) -> ScoreResult:
    """RULER's relative scores for one step's groups, written beside them; where they are and their summary."""
    t0 = time.perf_counter()
    store = ref.store()
    groups = store.read_groups(trajectories_uri)  # a damaged file raises DamagedRollouts naming its line
    if groups is None:
        raise FileNotFoundError(f"rollouts {trajectories_uri} are missing: run the flow again to gather them again")
    kept = (
        f"The gathered trajectories are kept at {trajectories_uri}; run again and they are scored without rolling out."
    )
    try:
        # Resolved once here (model, address, key from ART_JUDGE_*): the judge called is the judge named below.
        resolved = resolve_judge(judge, cache_root=ref.storage_url)
    except ValueError as e:
        raise JudgeError(f"no RULER judge to score step {step}: {e}. {kept}") from e
    try:
        scored = run_sync(_ruler_all(groups, resolved))
    except Exception as e:  # re-raised with what to fix; never scored as 0
        raise JudgeError(
            f"RULER judge {resolved.describe()} failed on step {step}: {type(e).__name__}: {e}. Check the judge's "
            f"address and its key (ART_JUDGE_API_KEY). {kept}",
            getattr(e, "usage", None),
        ) from e
    uri = store.scored("train", step)
    store.write_groups(uri, scored)
    summary = reward_summary(scored)
    get_run_logger().info("step %d: RULER mean score %.3f -> %s", step, summary["reward"], uri)
    return ScoreResult(step=step, uri=uri, summary=summary, judged=True, seconds=time.perf_counter() - t0)


async def _ruler_all(groups, judge: ResolvedJudge):
    from art_core.rewards.ruler import score_group

    # The key lives in the resolved judge only, never in a parameter: Prefect stores parameters.
    return await asyncio.gather(*(score_group(g, judge) for g in groups))
