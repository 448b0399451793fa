"""RULER against a local OpenAI-compatible judge that answers well, badly, or not at all."""

from __future__ import annotations

import asyncio
import glob
import json

import pytest

from art_core.gather import gather_trajectory_groups
from art_core.rewards import JudgeError, RulerConfig, ruler, ruler_score_group
from tests.rewards.fake_judge import FakeJudge
from tests.rewards.retail_style import POLICY, retail_group

# The fake judge scores 0.25 per "SUCCESS" in an attempt: these endings expect 0, .25, .5, .75.
GRADED = [(("SUCCESS " * k) + f"reply {k}", k > 1) for k in range(4)]
PRICE_IN, PRICE_OUT = 1.5e-07, 6e-07  # gpt-4o-mini in litellm's bundled price map, per token


async def test_scores_land_in_a_new_group_with_tokens_and_cost(fake_judge: FakeJudge, judge_options):
    group = retail_group(GRADED, scenario="s1")
    before = group.model_dump()
    scored = await ruler_score_group(group, **judge_options)

    assert scored.rewards() == [0.0, 0.25, 0.5, 0.75]
    for old, new in zip(group, scored):
        assert new.metrics["independent_reward"] == old.reward
        assert new.metrics["ruler_score"] == new.reward
        assert new.logs[-1].startswith(f"RULER score {new.reward:.3f}:") and "counted" in new.logs[-1]
    assert group.model_dump() == before  # the input group is not modified
    assert scored.metadata == {"scenario": "s1"}
    assert scored.metrics["judge_calls"] == 1
    assert scored.metrics["judge_prompt_tokens"] == 1000 and scored.metrics["judge_completion_tokens"] == 100
    assert scored.metrics["judge_cost_usd"] == pytest.approx(1000 * PRICE_IN + 100 * PRICE_OUT)

    (request,) = fake_judge.requests
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert FakeJudge.ids(request) == ["trajectory_1", "trajectory_2", "trajectory_3", "trajectory_4"]
    assert json.dumps(request["messages"]).count(POLICY[:60]) == 1  # the shared beginning, once


async def test_identical_trajectories_are_not_sent_to_be_told_apart(fake_judge: FakeJudge, judge_options):
    same = await ruler_score_group(retail_group([("SUCCESS done", True)] * 4), **judge_options)
    assert fake_judge.requests == []  # nothing to compare: no judge call
    assert len(set(same.rewards())) == 1 and "identical" in same.trajectories[0].logs[-1]

    # Each ending twice (the copies have other tool-call ids): only the 4 distinct ones are sent.
    scored = await ruler_score_group(retail_group(GRADED + GRADED), **judge_options)
    (request,) = fake_judge.requests
    assert len(FakeJudge.ids(request)) == 4
    assert scored.rewards() == [0.0, 0.25, 0.5, 0.75] * 2
    assert "identical to trajectory_2" in scored.trajectories[5].logs[-1]


async def test_a_failing_judge_is_retried_then_answers(fake_judge: FakeJudge, judge_options):
    fake_judge.script = ["500", "malformed", "wrong_count"]
    scored = await ruler_score_group(retail_group(GRADED), **judge_options, max_retries=3)
    assert len(fake_judge.requests) == 4
    assert scored.rewards() == [0.0, 0.25, 0.5, 0.75]
    assert scored.metrics["judge_retries"] == 3
    assert scored.metrics["judge_calls"] == 3  # the two unusable replies were paid for too
    assert scored.metrics["judge_prompt_tokens"] == 3000


@pytest.mark.parametrize("behaviour", ["500", "malformed", "wrong_count", "slow"])
async def test_a_judge_that_keeps_failing_raises_or_drops_the_group(fake_judge: FakeJudge, judge_options, behaviour):
    fake_judge.fail_marker, fake_judge.fail_behaviour, fake_judge.slow_s = "SUCCESS", behaviour, 1.0
    opts = dict(judge_options, max_retries=2, timeout_s=0.3)
    with pytest.raises(JudgeError, match="no usable reply in 3 attempts") as info:
        await ruler_score_group(retail_group(GRADED), **opts)
    assert len(fake_judge.requests) == 3
    assert info.value.usage.retries == 2

    fake_judge.requests.clear()
    assert await ruler_score_group(retail_group(GRADED), **opts, swallow_exceptions=True) is None
    assert len(fake_judge.requests) == 3


async def test_a_refused_request_is_not_retried(fake_judge: FakeJudge, judge_options):
    fake_judge.script = ["400"] * 5
    with pytest.raises(JudgeError, match="refused the request"):
        await ruler_score_group(retail_group(GRADED), **judge_options)
    assert len(fake_judge.requests) == 1


async def test_gather_drops_only_the_group_the_judge_failed(fake_judge: FakeJudge, judge_options):
    fake_judge.fail_marker = "ORDER-OF-DOOM"
    groups = [
        retail_group(GRADED, scenario="a"),
        retail_group(GRADED[:2] + [("ORDER-OF-DOOM", False)], scenario="b"),
        retail_group(GRADED[1:], scenario="c"),
    ]
    opts = dict(judge_options, max_retries=1)

    kept = await gather_trajectory_groups(
        groups, after_each=lambda g: ruler_score_group(g, **opts, swallow_exceptions=True), pbar_desc=None
    )
    assert [g.metadata["scenario"] for g in kept] == ["a", "c"]
    assert kept[0].rewards() == [0.0, 0.25, 0.5, 0.75] and kept[1].rewards() == [0.25, 0.5, 0.75]
    assert len(fake_judge.requests) == 2 + 2  # a and c once each, b twice (one retry), then dropped

    with pytest.raises(JudgeError):  # without swallowing, the step fails loudly instead
        await gather_trajectory_groups(groups, after_each=lambda g: ruler_score_group(g, **opts), pbar_desc=None)


async def test_a_second_identical_call_is_answered_from_the_cache(fake_judge: FakeJudge, judge_options, tmp_path):
    first = await ruler_score_group(retail_group(GRADED), **judge_options)
    second = await ruler_score_group(retail_group(GRADED), **judge_options)
    assert len(fake_judge.requests) == 1  # no HTTP request the second time
    assert second.rewards() == first.rewards()
    assert second.metrics["judge_cache_hits"] == 1 and second.metrics["judge_calls"] == 0
    assert second.metrics["judge_cost_usd"] == 0

    (entry,) = glob.glob(str(tmp_path / "store" / "_cache" / "ruler" / "*.json"))
    assert "test-key" not in open(entry).read()  # the judge's key is never written

    await ruler_score_group(retail_group(GRADED), **judge_options, rubric="Prefer short answers.")
    await ruler_score_group(retail_group(GRADED), **judge_options, cache=False)
    assert len(fake_judge.requests) == 3  # another rubric, or no cache: the judge is asked again


async def test_the_cache_lives_under_an_s3_storage_root_too(fake_judge: FakeJudge, judge_options, s3_root):
    from art_core.storage import Storage

    opts = dict(judge_options, cache_root=s3_root)
    first = await ruler_score_group(retail_group(GRADED), **opts)
    second = await ruler_score_group(retail_group(GRADED), **opts)
    assert len(fake_judge.requests) == 1 and second.rewards() == first.rewards()
    assert len(Storage(s3_root).fs.ls(f"{s3_root.removeprefix('s3://')}/_cache/ruler")) == 1


async def test_requests_per_endpoint_are_limited(fake_judge: FakeJudge, judge_options):
    fake_judge.delay_s = 0.2
    groups = [retail_group([(f"reply {i}", False), (f"other {i}", True)]) for i in range(5)]
    scored = await asyncio.gather(*(ruler_score_group(g, **judge_options, max_concurrency=2) for g in groups))
    assert len(scored) == 5 and len(fake_judge.requests) == 5
    assert fake_judge.max_in_flight == 2


async def test_weighted_combination_with_the_environment_reward(fake_judge: FakeJudge, judge_options):
    scored = await ruler_score_group(retail_group(GRADED), **judge_options, combine="weighted", ruler_weight=0.8)
    env = [float(cancels) for _, cancels in GRADED]
    judge = [0.0, 0.25, 0.5, 0.75]
    assert scored.rewards() == pytest.approx([0.8 * j + 0.2 * e for j, e in zip(judge, env)])
    assert [t.metrics["ruler_score"] for t in scored] == judge


async def test_ruler_on_plain_message_lists(fake_judge: FakeJudge, judge_options):
    convs = [[{"role": "user", "content": "add 2+2"}, {"role": "assistant", "content": "SUCCESS " * k}] for k in (4, 1)]
    scores = await ruler(convs, **judge_options)
    assert [(s.trajectory_id, s.score) for s in scores] == [("trajectory_1", 1.0), ("trajectory_2", 0.25)]


async def test_judge_from_settings_and_config_errors(fake_judge: FakeJudge, judge_options, monkeypatch):
    monkeypatch.setenv("ART_JUDGE_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("ART_JUDGE_API_BASE", fake_judge.base_url)
    monkeypatch.setenv("ART_JUDGE_API_KEY", "from-env")
    scored = await ruler_score_group(retail_group(GRADED), cache=False, config=RulerConfig(backoff_s=0.01))
    assert scored.rewards() == [0.0, 0.25, 0.5, 0.75]

    with pytest.raises(TypeError, match="unknown RULER option"):
        await ruler_score_group(retail_group(GRADED), retries=3, swallow_exceptions=True)
    monkeypatch.delenv("ART_JUDGE_MODEL")
    with pytest.raises(ValueError, match="ART_JUDGE_MODEL"):  # a misconfiguration is never swallowed
        await ruler_score_group(retail_group(GRADED), swallow_exceptions=True)
