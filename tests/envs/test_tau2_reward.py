"""tau2's reward on tau2's own tasks: the gold replay scores 1.0 everywhere, one wrong write or argument scores
0, and natural-language assertions go through a judge (a loopback fake here) whose failures never become scores.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from art_core.envs import load_environment
from art_core.envs.tau2.reward import assertion_reply_model, communicate, score
from art_core.envs.tool_use.tools import fresh_copy
from art_core.rewards.config import JudgeConfig
from art_core.rewards.judge import JudgeError
from tests.rewards.fake_judge import FakeJudge  # tests/rewards' loopback judge, reused

# Gold actions that fail on purpose or by tau2's own rules; tau2 skips a failing gold action, so do we.
INTENDED_GOLD_FAILURES = {
    # lookups with a wrong id, email or name the customer first gives (the gold lists keep them)
    **{t: "read" for t in ("2", "3", "4", "35", "37", "38", "39", "46", "47", "54", "55", "67", "68")},
    "64": "exchange_delivered_order_items on a pending order: tau2's tool refuses it; the next gold action modifies it",
    "105": "exchange of two kettles costs $21.10 more than gift card's $17.00 balance: tau2's tool refuses it too",
}


class NLJudge(FakeJudge):
    """The fake judge answering the NL-assertion schema: an assertion is met unless it contains a word in `unmet`."""

    def __init__(self) -> None:
        super().__init__()
        self.unmet: set[str] = set()

    def _reply(self, body, behaviour):
        if behaviour in ("500", "400"):
            return super()._reply(body, behaviour)
        outcomes = dict(re.findall(r"^(assertion_\d+): (.*)$", body["messages"][-1]["content"], re.M))
        reply = {
            i: {"explanation": "checked", "met": not any(w in outcomes[i] for w in self.unmet)} for i in self.ids(body)
        }
        content = json.dumps(reply)
        if behaviour == "malformed":
            content = content[: len(content) // 2]
        message = {"role": "assistant", "content": content}
        return 200, {
            "id": "x",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960},
        }


@pytest.fixture(scope="module")
def nl_judge():
    judge = NLJudge().start()
    yield judge
    judge.stop()


@pytest.fixture
def judge(nl_judge, monkeypatch):
    monkeypatch.setenv("ART_JUDGE_API_KEY", "test")  # keys come from the environment, never from a config
    nl_judge.reset()
    nl_judge.unmet = set()
    return nl_judge


def judge_config(judge: NLJudge, **kw) -> JudgeConfig:
    # a model in litellm's price map, so the cost is computed; no cache unless a test asks for it
    return JudgeConfig(
        model="openai/gpt-4.1-2025-04-14",
        api_base=judge.base_url,
        backoff_s=0.01,
        max_retries=1,
        cache=kw.pop("cache", False),
        litellm_params=kw,
    )


@pytest.fixture(scope="module")
def retail():
    return load_environment("tau2-retail")


@pytest.fixture(scope="module")
def airline():
    return load_environment("tau2-airline")


def gold_run(env, task_id: str, change=None):
    """What a perfect agent leaves behind: the gold actions run through the agent's tool path on a fresh
    database (optionally changed first by `change(name, arguments)`), and a reply saying every communicate_info."""
    task = env.data.tasks[task_id]
    db = fresh_copy(env.data.db)
    for a in task["evaluation_criteria"]["actions"] or []:
        name, args = (
            change(a["name"], json.loads(json.dumps(a["arguments"]))) if change else (a["name"], a["arguments"])
        )
        env.call_tool(db, name, args)
    said = "Here is everything: " + "; ".join(task["evaluation_criteria"]["communicate_info"] or [])
    return task, db, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": said}]


@pytest.mark.parametrize("name", ["tau2-retail", "tau2-airline"])
async def test_gold_replay_scores_one_on_every_task(name, judge):
    env = load_environment(name)
    failures = {}
    for task_id in env.data.tasks:
        task, db, messages = gold_run(env, task_id)
        metrics, details = await score(
            task["evaluation_criteria"], env.gold(task_id), db, messages, terminated=True, judge=judge_config(judge)
        )
        assert metrics["reward"] == 1.0 and metrics["r_db"] == 1.0 and metrics["r_communicate"] == 1.0, (
            task_id,
            metrics,
            details,
        )
        if details["gold_failures"]:
            failures[task_id] = details["gold_failures"]
    assert len(env.data.tasks) == {"tau2-retail": 114, "tau2-airline": 50}[name]
    expected = set(INTENDED_GOLD_FAILURES) if name == "tau2-retail" else set()
    assert set(failures) == expected, failures
    for task_id, failed in failures.items():  # the lookups fail as lookups; only 64 and 105 lose a write
        kinds = {n for n, _ in failed}
        assert (
            kinds <= {"exchange_delivered_order_items"}
            if INTENDED_GOLD_FAILURES[task_id] != "read"
            else not kinds & env.toolset.write_tools
        )
    retail_judged = sum(
        1
        for t in env.data.tasks.values()
        if t["evaluation_criteria"]["nl_assertions"] and "NL_ASSERTION" in t["evaluation_criteria"]["reward_basis"]
    )
    assert (
        len(judge.requests) == retail_judged == (40 if name == "tau2-retail" else 0)
    )  # airline's assertions are not scored


def test_one_wrong_write_or_argument_scores_zero(retail, airline):
    async def reward_of(env, task_id, change):
        task, db, messages = gold_run(env, task_id, change)
        metrics, _ = await score(
            task["evaluation_criteria"], env.gold(task_id), db, messages, terminated=True, judge=None
        )
        return metrics

    def other_item(name, args):  # task 0: exchange the keyboard for another available variant than the asked one
        if name == "exchange_delivered_order_items":
            db = retail.data.db
            old, new = args["item_ids"][0], args["new_item_ids"][0]
            product = next(i["product_id"] for i in db["orders"][args["order_id"]]["items"] if i["item_id"] == old)
            args["new_item_ids"][0] = next(
                v for v, r in db["products"][product]["variants"].items() if r["available"] and v not in (old, new)
            )
        return name, args

    def other_reason(name, args):
        return name, (
            {**args, "reason": "ordered by mistake" if args["reason"] != "ordered by mistake" else "no longer needed"}
            if name == "cancel_pending_order"
            else args
        )

    def extra_write(name, args):  # the gold write, then one more nobody asked for
        return (
            (
                "modify_user_address",
                {
                    "user_id": "noah_brown_6181",
                    "address1": "1 A St",
                    "address2": "",
                    "city": "X",
                    "state": "CA",
                    "country": "USA",
                    "zip": "1",
                },
            )
            if name == "get_order_details"
            else (name, args)
        )

    def other_passenger(name, args):
        if name == "update_reservation_passengers":
            args["passengers"][0]["dob"] = "1999-09-09"
        return name, args

    import asyncio

    cancel_task = next(
        t
        for t, task in retail.data.tasks.items()
        if [a["name"] for a in task["evaluation_criteria"]["actions"]].count("cancel_pending_order") == 1
        and not task["evaluation_criteria"]["nl_assertions"]
    )
    passenger_task = next(
        t
        for t, task in airline.data.tasks.items()
        if any(a["name"] == "update_reservation_passengers" for a in task["evaluation_criteria"]["actions"])
    )
    for env, task_id, change in (
        (retail, "0", other_item),
        (retail, cancel_task, other_reason),
        (retail, "5", extra_write),
        (airline, passenger_task, other_passenger),
    ):
        metrics = asyncio.run(reward_of(env, task_id, change))
        assert metrics["reward"] == 0.0 and metrics["r_db"] == 0.0, (task_id, change.__name__, metrics)
        assert asyncio.run(reward_of(env, task_id, None))["reward"] == 1.0  # the same task done right


async def test_communicate_info_is_checked_as_tau2_checks_it(airline):
    task_id = next(t for t, task in airline.data.tasks.items() if task["evaluation_criteria"]["communicate_info"])
    task, db, _ = gold_run(airline, task_id)
    silent = [{"role": "assistant", "content": "All done."}]
    metrics, details = await score(
        task["evaluation_criteria"], airline.gold(task_id), db, silent, terminated=True, judge=None
    )
    assert metrics["reward"] == 0.0 and metrics["r_db"] == 1.0 and metrics["r_communicate"] == 0.0
    assert not any(c["met"] for c in details["communicate_checks"])
    assert communicate(["1234"], ["Your total is $1,234."])[0] == 1.0 and communicate(["$1,234"], ["$1,234"])[0] == 0.0


async def test_a_cut_off_run_scores_zero_even_with_the_right_database(retail, judge):
    task, db, messages = gold_run(retail, "36")
    metrics, details = await score(
        task["evaluation_criteria"], retail.gold("36"), db, messages, terminated=False, judge=judge_config(judge)
    )
    assert metrics["reward"] == 0.0 and metrics["truncated"] == 1.0 and metrics["r_db"] == 1.0
    assert not judge.requests and "r_nl_assertion" not in metrics  # no judge is paid for a run that scores 0 anyway


async def test_nl_assertions_go_through_the_judge(retail, judge):
    task, db, messages = gold_run(retail, "36")
    assertions = task["evaluation_criteria"]["nl_assertions"]
    metrics, details = await score(
        task["evaluation_criteria"], retail.gold("36"), db, messages, terminated=True, judge=judge_config(judge)
    )
    assert (
        metrics["reward"] == 1.0
        and metrics["r_nl_assertion"] == 1.0
        and metrics["nl_judge_calls"] == 1.0
        and metrics["nl_judge_cost_usd"] > 0
    )
    sent = judge.requests[-1]
    assert sent["temperature"] == 0.0 and list(judge.ids(sent)) == [
        f"assertion_{i + 1}" for i in range(len(assertions))
    ]
    assert (
        all(a in sent["messages"][-1]["content"] for a in assertions)
        and "Here is everything" in sent["messages"][-1]["content"]
    )
    assert [v["assertion"] for v in details["nl_assertions"]] == assertions
    # the judge says one assertion is not met: the run scores 0 although the database is right
    judge.unmet = {assertions[0].split()[-1]}
    metrics, details = await score(
        task["evaluation_criteria"], retail.gold("36"), db, messages, terminated=True, judge=judge_config(judge)
    )
    assert metrics["reward"] == 0.0 and metrics["r_db"] == 1.0 and metrics["r_nl_assertion"] == 0.0
    assert details["nl_assertions"][0]["met"] is False


@pytest.mark.parametrize("behaviour", ["500", "400", "malformed"])
async def test_a_failed_judge_call_raises_and_never_becomes_a_score(retail, judge, behaviour):
    task, db, messages = gold_run(retail, "36")
    judge.fail_marker, judge.fail_behaviour = "expected_outcomes", behaviour
    with pytest.raises(JudgeError) as e:
        await score(
            task["evaluation_criteria"], retail.gold("36"), db, messages, terminated=True, judge=judge_config(judge)
        )
    assert len(judge.requests) == (
        1 if behaviour == "400" else 2
    )  # a refusal is not retried; the rest once (max_retries=1)
    assert e.value.usage.retries == (0 if behaviour == "400" else 1)


async def test_verdicts_are_cached_under_the_storage_root(retail, judge, tmp_path, monkeypatch):
    monkeypatch.setenv("ART_STORAGE_ROOT", str(tmp_path))
    task, db, messages = gold_run(retail, "36")
    first, _ = await score(
        task["evaluation_criteria"],
        retail.gold("36"),
        db,
        messages,
        terminated=True,
        judge=judge_config(judge, cache=True),
    )
    again, _ = await score(
        task["evaluation_criteria"],
        retail.gold("36"),
        db,
        messages,
        terminated=True,
        judge=judge_config(judge, cache=True),
    )
    assert (
        len(judge.requests) == 1 and first["reward"] == again["reward"] == 1.0 and again["nl_judge_cache_hits"] == 1.0
    )
    assert list((tmp_path / "_cache" / "ruler").glob("*.json"))


def test_the_reply_schema_names_exactly_the_assertions():
    model = assertion_reply_model(2)
    assert list(model.model_json_schema()["properties"]) == ["assertion_1", "assertion_2"]
    with pytest.raises(ValueError):
        model.model_validate({"assertion_1": {"explanation": "", "met": True}})


async def test_an_episode_whose_judge_fails_raises_instead_of_scoring(judge, fake_chat_server):
    from openai import AsyncOpenAI

    f = fake_chat_server
    env = load_environment(
        "tau2-retail",
        user={"model": "openai/user-sim", "api_base": f.base_url, "api_key": "test"},
        judge=judge_config(judge).model_dump(),
    )
    scenario = next(s for s in env.scenarios("test") if s.id == "36")
    actions = scenario.data["task"]["evaluation_criteria"]["actions"]
    f.script("user-sim", [f.say("Hi."), f.say("Thanks! ###STOP###")] * 2)
    f.script("agent", [f.tool_call(a["name"], a["arguments"]) for a in actions] + [f.say("Done.")])
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert (
        traj.reward == 1.0
        and traj.metrics["r_nl_assertion"] == 1.0
        and json.loads(traj.metadata["reward_details"])["nl_assertions"]
    )
    judge.fail_marker, judge.fail_behaviour = "expected_outcomes", "500"
    f.script("agent", [f.tool_call(a["name"], a["arguments"]) for a in actions] + [f.say("Done.")])
    with pytest.raises(JudgeError):
        await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
