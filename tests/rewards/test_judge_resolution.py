"""The judge is resolved in one place (art_core.rewards.config.resolve_judge) and errors name the judge asked.

The scoring task's test calls the task's body (`score_groups.fn`) on groups in a local storage root, with the
fake judge on loopback refusing every request, so what it checks is the message a user reads."""

from __future__ import annotations

import pytest

from art_core.rewards import JudgeConfig, JudgeError, resolve_judge
from art_core.rewards.config import ART_DEFAULT_JUDGE_MODEL
from art_core.store import ModelRef
from tests.rewards.fake_judge import FakeJudge
from tests.rewards.retail_style import retail_group


@pytest.fixture
def no_judge_settings(monkeypatch, tmp_path_factory):
    for var in ("ART_JUDGE_MODEL", "ART_JUDGE_API_BASE", "ART_JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))  # no .env file of the checkout is read


def test_the_default_judge_is_decided_once(no_judge_settings, monkeypatch):
    with pytest.raises(ValueError, match="ART_JUDGE_MODEL"):
        resolve_judge(JudgeConfig())

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # ART's default judge, reachable with OpenAI's key
    monkeypatch.setenv("ART_JUDGE_API_BASE", "http://judge.example/v1")  # belongs to ART_JUDGE_MODEL, unset
    judge = resolve_judge(JudgeConfig())
    assert judge.model == ART_DEFAULT_JUDGE_MODEL == "openai/o3" and judge.api_base is None

    monkeypatch.setenv("ART_JUDGE_MODEL", "hosted_vllm/judge")
    monkeypatch.setenv("ART_JUDGE_API_KEY", "from-env")
    judge = resolve_judge(JudgeConfig(timeout_s=7))
    assert (judge.model, judge.api_base, judge.config.timeout_s) == ("hosted_vllm/judge", "http://judge.example/v1", 7)
    assert judge.litellm_params["api_key"] == "from-env" and "from-env" not in repr(judge)

    # Explicit arguments win over the config and the settings; a key passed in stays out of the config.
    judge = resolve_judge(
        JudgeConfig(model="openai/a"),
        judge_model="openai/b",
        extra_litellm_params={"api_key": "call-key", "temperature": 0.5},
        cache_root="/tmp/x",
    )
    assert judge.model == "openai/b" and judge.api_base is None and judge.cache_root == "/tmp/x"
    assert judge.config.litellm_params == {"temperature": 0.5} and judge.litellm_params["api_key"] == "call-key"
    with pytest.raises(TypeError, match="unknown RULER option"):
        resolve_judge(JudgeConfig(), retries=3)


@pytest.mark.parametrize("named_by", ["ART_JUDGE_MODEL", "OPENAI_API_KEY"])
def test_a_failing_judge_call_names_the_model_that_was_called(
    fake_judge: FakeJudge, no_judge_settings, monkeypatch, tmp_path, named_by
):
    from art_pipeline.tasks.score import score_groups

    ref = ModelRef(storage_url=str(tmp_path / "art"), project="p", model="m", base_model="/models/tiny")
    store = ref.store()
    uri = store.trajectories("train", 0)
    store.write_groups(uri, [retail_group()])
    fake_judge.script = ["400"] * 3  # refused: not retried
    if named_by == "ART_JUDGE_MODEL":
        monkeypatch.setenv("ART_JUDGE_MODEL", "openai/judge-from-env")
        monkeypatch.setenv("ART_JUDGE_API_BASE", fake_judge.base_url)
        monkeypatch.setenv("ART_JUDGE_API_KEY", "test-key")
        config, called = JudgeConfig(max_retries=0, cache=False), "openai/judge-from-env"
    else:  # no ART_JUDGE_MODEL: ART's default judge is the one asked, and the one named
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        config, called = JudgeConfig(api_base=fake_judge.base_url, max_retries=0, cache=False), "openai/o3"

    with pytest.raises(JudgeError) as e:
        score_groups.fn(ref, uri, "fingerprint", 0, config)
    message = str(e.value)
    assert len(fake_judge.requests) == 1 and fake_judge.requests[0]["model"] == called.removeprefix("openai/")
    assert f"RULER judge {called!r} at {fake_judge.base_url}" in message, message
    assert "ART_JUDGE_MODEL'" not in message and f"kept at {uri}" in message
