"""Expert demonstrations of retail and airline (art_core.envs.customer_service.expert), the never-acts baseline and
the task categories, all through the real environments and their scripted customer (no model, no network).

Building a domain's train demonstrations plays every train scenario (about 35 s for airline, 45 s for retail on
one core); the module builds each once and the tests read what it wrote.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from art_core.envs.customer_service.categories import CATEGORIES, mean_by_category, scenario_category
from art_core.envs.customer_service.expert import (
    build_demonstrations,
    load_env,
    main,
    replay_demonstration,
    unrevealed_values,
)
from art_core.envs.customer_service.policies import (
    CannotDemonstrate,
    PolicyClient,
    Say,
    call,
    never_acts,
    play_policy,
    rewards_by_category,
)
from art_core.evaluate import evaluate_policy
from art_core.rollouts import RolloutSpec
from art_core.sft import read_sft_file

DOMAINS = ("retail", "airline")


@pytest.fixture(scope="module", params=DOMAINS)
def built(request, tmp_path_factory):
    """(domain, Demonstrations, path of the JSONL) for the domain's whole train split."""
    path = tmp_path_factory.mktemp("demos") / f"{request.param}.jsonl"
    return request.param, build_demonstrations(request.param, "train", out=path), path


@pytest.mark.slow
def test_every_train_scenario_is_demonstrated(built):
    domain, demos, _ = built
    scenarios = load_env(domain).scenarios("train")
    assert demos.skip_counts() == {}, demos.skip_counts()
    assert [r["task_id"] for r in demos.rows] == [s.id for s in scenarios]
    assert {r["category"] for r in demos.rows} == set(CATEGORIES)
    if domain == "retail":  # customers with two requests too: the second is asked once the first is dealt with
        two = [r for r in demos.rows if "second thing" in r["messages"][1]["content"]]
        assert len(two) >= 0.1 * len(scenarios)
        for row in two:
            said = [m["content"] for m in row["messages"] if m["role"] == "user"]
            assert sum(m.startswith("Thank you. The other thing: ") for m in said) == 1, row["task_id"]
    print(demos.summary())


@pytest.mark.slow
def test_every_demonstration_replays_to_full_reward(built):
    """The JSONL alone reproduces each conversation through the environment, and the environment scores it 1.0."""
    domain, demos, path = built
    env = load_env(domain)
    by_id = {s.id: s for s in env.scenarios("train")}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(demos.rows)
    for row in rows:
        replayed = replay_demonstration(env, by_id[row["task_id"]], row["messages"])
        assert replayed.reward == 1.0, row["task_id"]
        assert replayed.metadata["stop_reason"] == "user_stop"  # the customer was satisfied, nothing was cut off
        assert replayed.metrics["writes_without_yes"] == 0, row["task_id"]  # every write waited for its yes
        assert replayed.messages()[: len(row["messages"])] == row["messages"]


@pytest.mark.slow
def test_the_expert_uses_only_what_the_conversation_has_shown(built):
    _, demos, _ = built
    for row in demos.rows:
        assert unrevealed_values(row["messages"], row["tools"]) == [], row["task_id"]
        # and it does act: every write demonstration calls a tool after the customer's yes
        if row["category"] == "write":
            roles = [(m["role"], bool(m.get("tool_calls"))) for m in row["messages"]]
            yes = max(
                i for i, m in enumerate(row["messages"]) if m["role"] == "user" and m["content"].startswith("Yes")
            )
            assert ("assistant", True) in roles[yes:], row["task_id"]


def test_an_invented_id_is_caught():
    shown = [
        {"role": "system", "content": "policy: order ids look like #W1234567"},
        {"role": "user", "content": "Cancel order #W1111111, it is no longer needed."},
    ]

    def calling(**arguments):
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "cancel", "arguments": json.dumps(arguments)}}
            ],
        }

    assert unrevealed_values(shown + [calling(order_id="#W1111111", reason="no longer needed")]) == []
    assert unrevealed_values(shown + [calling(order_id="#W2222222", reason="no longer needed")]) == [
        "message 2 calls cancel with '#W2222222', never shown before"
    ]
    # the system prompt reveals nothing; a computed number must be shown (say, in the proposal) before it is used
    assert len(unrevealed_values(shown + [calling(order_id="#W1234567", reason="x", amount=54)])) == 3
    said = {"role": "assistant", "content": "The refund is 54."}
    assert unrevealed_values(shown + [said, calling(order_id="#W1111111", reason="no longer needed", amount=54)]) == []
    # an id written to the customer counts as much as one in a call
    assert unrevealed_values(shown + [{"role": "assistant", "content": "Your order #W7777777 is pending."}]) == [
        "message 2 writes '#W7777777', never shown before"
    ]
    # a value the tool's schema enumerates is the tool's to offer
    tools = [{"type": "function", "function": {"parameters": {"properties": {"reason": {"enum": ["x"]}}}}}]
    assert unrevealed_values(shown + [calling(order_id="#W1111111", reason="x")], tools) == []


def test_the_demonstrations_load_through_the_sft_loader_and_render_with_the_template(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    from art_core.training.sft import tokenize_sft

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    for domain in DOMAINS:
        path = tmp_path / f"{domain}.jsonl"
        demos = build_demonstrations(domain, "train", limit=12, out=path)
        examples = read_sft_file(str(path))
        assert len(examples) == len(demos.rows) > 0
        for example, row in zip(examples, demos.rows):
            assert example.messages() == row["messages"] and example.tools == row["tools"]
            assert example.messages()[-1]["role"] == "assistant"
            seq = tokenize_sft(example.messages(), example.tools, tokenizer)
            trained = tokenizer.decode([t for t, on in zip(seq.input_ids, seq.trainable) if on])
            assert "<tool_call>" in trained and row["messages"][-1]["content"] in trained
            assert "###STOP###" not in tokenizer.decode(seq.input_ids)  # the customer's closing line is left off


def test_never_acts_scores_zero_on_write_tasks_and_full_marks_for_a_refusal():
    for domain in DOMAINS:
        env = load_env(domain)
        scenarios = env.scenarios("val")[:40]
        trajectories = play_policy(env, scenarios, never_acts)
        for scenario, t in zip(scenarios, trajectories):
            assert t.metrics["tool_calls"] == 0
            if scenario_category(scenario) == "write":
                assert t.reward == 0.0, scenario.id
        rewards = mean_by_category([t.reward for t in trajectories], scenarios)
        assert rewards["write"] == 0.0 and rewards["refuse"] == 1.0 and rewards.get("answer", 0.0) == 0.0
        first = scenarios[:10]
        assert rewards_by_category(env, first, never_acts) == mean_by_category(
            [t.reward for t in trajectories[:10]], first
        )


def test_categories_cover_every_scenario():
    for domain in DOMAINS:
        env = load_env(domain)
        for split in ("train", "val", "test"):
            scenarios = env.scenarios(split)
            cats = [scenario_category(s) for s in scenarios]
            assert set(cats) == set(CATEGORIES), (domain, split)
            for s, c in zip(scenarios, cats):
                task = s.data["task"]
                assert c == ("write" if task["actions"] else "answer" if task["outputs"] else "refuse")


def test_a_policy_plays_through_the_environment_and_its_refusals_are_counted():
    env = load_env("airline")
    scenario = next(s for s in env.scenarios("train") if s.id.endswith("refuse_cancel"))

    def invents(opening):
        yield from call("get_user_details", user_id="nobody_0000")

    (refused,) = play_policy(env, [scenario], invents)
    assert isinstance(refused, CannotDemonstrate) and "not found" in str(refused)  # the tool said no

    def stops_early(opening):
        yield Say("Could you give me your user id?")

    with pytest.raises(CannotDemonstrate, match="nothing more to say"):
        asyncio.run(env.rollout(PolicyClient(stops_early), "p", scenario))


def test_the_command_line_prints_the_counts(tmp_path, capsys):
    out = tmp_path / "demos.jsonl"
    main(["--domain", "retail", "--limit", "10", "--out", str(out), "--never-acts"])
    printed = capsys.readouterr().out
    assert "retail train:" in printed and "scenarios demonstrated" in printed and "never-acts reward" in printed
    assert len(out.read_text().splitlines()) == int(printed.split(": ")[1].split(" of ")[0])


def _until_first_write(play, writes):
    """Play `play` (the expert's) up to its first write call, which is returned unmade."""
    turn = next(play)
    while not (hasattr(turn, "name") and turn.name in writes):
        turn = play.send((yield turn))
    return turn


def test_the_progress_reward_ranks_partial_work_and_never_reaches_evaluation():
    """train_reward="progress" gives train rollouts partial credit, so a group of a small model's attempts that
    all fail the task still differ: doing nothing < finding the customer and stopping before the first write <
    the expert's whole job (1.0). Val rollouts of the same environment keep the all-or-nothing task reward."""
    from art_core.envs import load_environment
    from art_core.envs.customer_service.expert import expert_policy

    for domain in DOMAINS:
        env = load_environment(domain, seed=0, user="scripted", max_turns=30, train_reward="progress")
        expert = expert_policy(domain)
        writes = env.domain.write_tools

        def stops_before_writing(opening, expert=expert, writes=writes):
            yield from _until_first_write(expert(opening), writes)
            yield from never_acts(opening)

        scenarios = [s for s in env.scenarios("train") if scenario_category(s) == "write"][:6]
        done, halfway, idle = (play_policy(env, scenarios, p) for p in (expert, stops_before_writing, never_acts))
        for s, full, half, none in zip(scenarios, done, halfway, idle):
            assert not isinstance(full, CannotDemonstrate), (domain, s.id, full)
            assert full.reward == 1.0 == full.metrics["task_reward"], (domain, s.id)
            assert none.reward < half.reward < full.reward, (domain, s.id, none.reward, half.reward)
            assert half.metrics["task_reward"] == none.metrics["task_reward"] == 0.0  # the task reward: both failed

        val = [s for s in env.scenarios("val") if scenario_category(s) == "write"][:4]
        played = [t for t in play_policy(env, val, stops_before_writing) if not isinstance(t, CannotDemonstrate)]
        assert played
        for t in played:
            assert t.reward == t.metrics["task_reward"] == 0.0 and t.metrics["progress"] > 0.0

        # An evaluation scores the task reward even on the train split: the library's evaluate_policy (and
        # evaluate_model, which shares the step) and the pipeline's evaluation spec, whose cache key drops it.
        report, groups = asyncio.run(evaluate_policy(env, never_acts, split="train", scenarios=12))
        rollouts = [t for g in groups for t in g.trajectories]
        assert all(t.reward == t.metrics["task_reward"] for t in rollouts)
        assert any(t.metrics["progress"] != t.metrics["task_reward"] for t in rollouts)  # the option was set
        assert report.reward == pytest.approx(sum(t.metrics["task_reward"] for t in rollouts) / len(rollouts))
        spec = RolloutSpec(environment=domain, env_options={"seed": 0, "train_reward": "progress"})
        assert spec.for_evaluation({}).env_options == {"seed": 0}


def test_the_arguments_reward_credits_a_write_with_one_wrong_argument():
    """train_reward="arguments": a rollout that reaches the right write with one argument wrong (the tool refuses
    it) earns part of the writes third, where "progress" gives it nothing, so a group whose rollouts all miss
    the exact write still differs by how close each came. The expert's whole job is still 1.0 and doing nothing
    still earns no write credit."""
    from art_core.envs import load_environment
    from art_core.envs.customer_service.expert import expert_policy
    from art_core.envs.customer_service.policies import Call

    for domain in DOMAINS:
        env = load_environment(domain, seed=0, user="scripted", max_turns=30, train_reward="arguments")
        expert = expert_policy(domain)
        writes = env.domain.write_tools

        def one_argument_wrong(opening, expert=expert, writes=writes):
            turn = yield from _until_first_write(expert(opening), writes)
            key = next(k for k, v in turn.arguments.items() if isinstance(v, str))
            yield Call(turn.name, {**turn.arguments, key: turn.arguments[key] + "-not-this"})
            yield from never_acts(opening)

        scenarios = [s for s in env.scenarios("train") if scenario_category(s) == "write"][:6]
        done, close, idle = (play_policy(env, scenarios, p) for p in (expert, one_argument_wrong, never_acts))
        compared = 0
        for s, full, near, none in zip(scenarios, done, close, idle):
            assert not isinstance(full, CannotDemonstrate), (domain, s.id, full)
            first = next(a for a in s.data["task"]["actions"] if a["name"] in writes)
            if len(first["kwargs"]) < 2:
                continue  # one argument (a cancel's reservation id): wrong means no credit, as it should
            compared += 1
            assert full.reward == full.metrics["progress"] == full.metrics["argument_progress"] == 1.0, (domain, s.id)
            assert near.metrics["task_reward"] == 0.0 and near.metrics["tool_errors"] >= 1, (domain, s.id)
            assert near.reward == near.metrics["argument_progress"] > near.metrics["progress"], (domain, s.id)
            assert none.metrics["argument_progress"] == none.metrics["progress"], (domain, s.id)
        assert compared >= 3, domain

        val = [s for s in env.scenarios("val") if scenario_category(s) == "write"][:2]
        for t in play_policy(env, val, one_argument_wrong):
            if not isinstance(t, CannotDemonstrate):
                assert t.reward == t.metrics["task_reward"] == 0.0  # evaluation splits keep the task reward


def test_the_safe_progress_reward_gives_a_forbidden_write_nothing():
    """train_reward="safe_progress": on a task that wants no write (a forbidden request, a question), an episode
    that changed the database scores 0 where "progress" still gives it up to 2/3 (the customer found, nothing
    wrong said), so a forbidden write earns less than declining. Write tasks and harmless episodes score as
    with "progress"; val rollouts keep the task reward."""
    from art_core.envs import load_environment
    from art_core.envs.customer_service.domain import MadeCall, progress

    for domain in DOMAINS:
        env = load_environment(domain, seed=0, user="scripted", max_turns=30, train_reward="safe_progress")
        train = env.scenarios("train")
        task = env.tasks["train"][next(i for i, s in enumerate(train) if scenario_category(s) == "refuse")]
        assert not [a for a in task.actions if a.name not in env.domain.terminal_tools]  # a task that wants no write
        found = [MadeCall(name="find", arguments="{}", result=f"user {task.user_id}", error=False)]
        for harmed, expected_progress, expected_safe in ((True, 2 / 3, 0.0), (False, 1.0, 1.0)):
            exact = not harmed  # the database equals the gold replay's (unchanged) only without the write
            assert progress(env.domain, task, found, [], exact=exact) == pytest.approx(expected_progress)
            assert progress(env.domain, task, found, [], exact=exact, no_harm=True) == pytest.approx(expected_safe)
        write_task = env.tasks["train"][next(i for i, s in enumerate(train) if scenario_category(s) == "write")]
        for exact in (True, False):  # a task that wants writes: no change from "progress"
            assert progress(env.domain, write_task, found, [], exact=exact, no_harm=True) == progress(
                env.domain, write_task, found, [], exact=exact
            )

        # Through the environment: the option picks the reward of train rollouts only.
        refusals = [s for s in train if scenario_category(s) == "refuse"][:3]
        for t in play_policy(env, refusals, never_acts):
            assert t.reward == t.metrics["safe_progress"] == t.metrics["progress"] != t.metrics["task_reward"]
        val = [s for s in env.scenarios("val") if scenario_category(s) == "refuse"][:2]
        for t in play_policy(env, val, never_acts):
            assert t.reward == t.metrics["task_reward"]
