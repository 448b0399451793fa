"""RULER with a real judge over HTTP: the project's vLLM server, serving the tiny model, as the judge.

The tiny model has random weights: every reply that parses with exactly the 8 ids sent and scores in
[0, 1] does so because vLLM enforced the reply's JSON schema, not because the model knows JSON.
"""

from __future__ import annotations

import pytest

from art_core.rewards import ruler_score_group
from tests.rewards.retail_style import retail_group


@pytest.mark.vllm
async def test_vllm_judge_scores_a_group_of_eight_retail_trajectories(vllm_endpoint, tmp_path):
    group = retail_group()
    assert len(group) == 8
    options = dict(
        judge_model=f"openai/{vllm_endpoint.model}",
        extra_litellm_params={
            "api_base": vllm_endpoint.base_url,
            "api_key": vllm_endpoint.api_key,
            # A random model under a grammar: sampling ends strings and objects, greedy decoding could
            # pick whitespace forever. The 1.9k-token prompt plus 2k fits the tiny model's 4k context.
            "temperature": 1.0,
            "max_tokens": 2000,
        },
        explanation_max_chars=40,  # schema maxLength: keeps a rambling judge inside max_tokens
        max_retries=4,
        backoff_s=0.1,
        cache_root=str(tmp_path),
    )
    scored = await ruler_score_group(group, **options)

    assert len(scored) == 8
    for old, new in zip(group, scored):
        assert 0.0 <= new.reward <= 1.0
        assert new.metrics["ruler_score"] == new.reward
        assert new.metrics["independent_reward"] == old.reward
        assert new.logs[-1].startswith("RULER score")
    assert scored.metrics["judge_calls"] >= 1
    assert scored.metrics["judge_prompt_tokens"] > 1000 * scored.metrics["judge_calls"]
    assert scored.metrics["judge_completion_tokens"] > 0

    again = await ruler_score_group(group, **options)  # the same request: from the cache, no HTTP call
    assert again.rewards() == scored.rewards() and again.metrics["judge_cache_hits"] == 1
