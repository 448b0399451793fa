"""tau2 expert demonstrations: derived from the gold actions, played through the real tau2 environment with the
scripted customer, using only values the conversation revealed, and replaying to reward 1.0.

The suite plays a fixed sample (the first tasks of each train split, about 20 s); the full count is what
`python -m art_core.envs.tau2.expert --domain retail|airline --out ...` prints (retail 45 of 74 kept,
29 of the others need tau2's LLM judge; airline 28 of 30). Skipped where tau2's data is absent.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from art_core.envs.customer_service.expert import replay_demonstration, unrevealed_values
from art_core.envs.customer_service.policies import PolicyClient, never_acts

expert = pytest.importorskip("art_core.envs.tau2.expert")
SAMPLE = {"retail": 16, "airline": 12}


@pytest.fixture(scope="module")
def envs():
    from art_core.envs.tau2.data import Tau2DataMissing

    try:
        return {d: expert.load_tau2_env(d) for d in SAMPLE}
    except Tau2DataMissing:
        pytest.skip("tau2 data not installed")


@pytest.fixture(scope="module")
def demos(envs, monkeypatch_module):
    monkeypatch_module.delenv("ART_JUDGE_MODEL", raising=False)
    return {d: expert.build_tau2_demonstrations(d, limit=n) for d, n in SAMPLE.items()}


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("domain", list(SAMPLE))
def test_every_kept_demonstration_replays_to_one(envs, demos, domain):
    env, d = envs[domain], demos[domain]
    assert len(d.rows) + len(d.skipped) == SAMPLE[domain]
    assert len(d.rows) >= SAMPLE[domain] // 2, d.summary()
    by_id = {s.id: s for s in env.scenarios("train")}
    for row in d.rows:
        trajectory = replay_demonstration(env, by_id[row["task_id"]], row["messages"])
        assert trajectory.reward == 1.0, row["task_id"]
        assert trajectory.metadata["stop_reason"] == "user_stop"
        assert unrevealed_values(row["messages"], row["tools"], free_text=expert.FREE_TEXT) == []
        assert row["tools"] == env.tools() and row["messages"][-1]["role"] == "assistant"
    assert {r["category"] for r in d.rows} >= {"write", "refuse"}


def test_skips_are_counted_with_reasons(demos):
    retail = demos["retail"]
    assert all(reason for reason in retail.skipped.values())
    judged = [i for i, r in retail.skipped.items() if r.startswith("needs tau2's NL-assertion judge")]
    assert judged == ["2", "3", "4", "16", "19"]  # their reward asks an LLM judge: none here


def test_the_expert_proposes_each_write_and_waits_for_yes(demos):
    row = next(r for r in demos["retail"].rows if r["task_id"] == "0")
    roles = [(m["role"], (m.get("tool_calls") or [{}])[0].get("function", {}).get("name")) for m in row["messages"]]
    write = roles.index(("assistant", "exchange_delivered_order_items"))
    assert "Shall I proceed?" in row["messages"][write - 2]["content"]
    assert row["messages"][write - 1] == {"role": "user", "content": "Yes, please go ahead."}
    identify = roles.index(("assistant", "find_user_id_by_name_zip"))
    assert identify < write  # identified first, as the policy says


def test_a_planted_unrevealed_id_is_caught(demos):
    row = json.loads(json.dumps(demos["airline"].rows[0]))
    call = next(m for m in row["messages"] if m.get("tool_calls"))
    call["tool_calls"][0]["function"]["arguments"] = json.dumps({"user_id": "someone_else_1234"})
    assert unrevealed_values(row["messages"], row["tools"]) != []


@pytest.mark.parametrize("domain", list(SAMPLE))
def test_never_acts_scores_zero_on_write_tasks(envs, domain):
    from art_core.evaluate import evaluate_policy

    env = envs[domain]
    report, _ = asyncio.run(evaluate_policy(env, never_acts, split="train", scenarios=SAMPLE[domain], trials=1))
    assert report.by_category["write"].reward == 0.0 and report.headline.value == 0.0
    assert report.by_category["write"].scenarios >= 3


def test_evaluate_tau2_reports_pass_k_per_category_beside_never_acts_and_published_figures(envs, monkeypatch):
    from art_core.envs.tau2.evaluation import evaluate_tau2
    from art_core.serving import Endpoint

    class Served(PolicyClient):  # a "served model" that never acts, so the run needs no server
        async def close(self) -> None:
            pass

    monkeypatch.setattr(Endpoint, "client", lambda self, **_: Served(never_acts))
    endpoint = Endpoint(base_url="http://unused/v1", base_name="never")
    text, report, floor = asyncio.run(
        evaluate_tau2("airline", endpoint, "never", scenarios=6, trials=2, skip_judged=True)
    )
    assert report.pass_k.keys() == {1, 2} and report.reward == floor.reward
    for expected in ("| never, write |", "| never-acts, write |", "| GPT-4.1 | 56.0 |", "scripted customer"):
        assert expected in text
    # which writes the failed tasks needed, with the tries right of each
    assert "## Per kind of write task" in text and report.by_kind
    for kind, score in report.by_kind.items():
        assert f"| {kind} | {score.scenarios} | 0/{score.scenarios * 2} (0.000) |" in text


def test_skip_judged_evaluates_only_the_unjudged_tasks_and_the_base_model_beside(envs, monkeypatch):
    """retail's test tasks 10-13 need tau2's LLM judge: --skip-judged leaves them out of what is played (no judge
    is called), and a baseline on the same endpoint is evaluated on the same tasks with the change paired."""
    from art_core.envs.tau2.evaluation import evaluate_tau2
    from art_core.serving import Endpoint

    class Served(PolicyClient):
        async def close(self) -> None:
            pass

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    monkeypatch.setattr(Endpoint, "client", lambda self, **_: Served(never_acts))
    endpoint = Endpoint(base_url="http://unused/v1", base_name="base")
    tasks = envs["retail"].scenarios("test")[:14]
    unjudged = [s.id for s in tasks if not expert.needs_judge(s.data["task"])]
    assert len(unjudged) < len(tasks)  # the sample holds judged tasks
    text, report, floor = asyncio.run(
        evaluate_tau2("retail", endpoint, "agent", scenarios=14, trials=1, skip_judged=True, baselines=["base"])
    )
    assert list(report.per_scenario) == unjudged and list(floor.per_scenario) == unjudged
    assert f"{len(tasks) - len(unjudged)} tasks needing tau2's NL-assertion judge were left out" in text
    assert "| base, all |" in text and "| base, write |" in text
    assert "base: 0.000 ± 0.000, change +0.000 ± 0.000 paired; never-acts: 0.000" in text


def test_the_command_refuses_a_missing_checkpoint_before_serving(tmp_path, capsys):
    from art_core.envs.tau2.evaluation import main

    with pytest.raises(SystemExit, match="no checkpoints for demo-agent/retail-seed0"):
        main(["--domain", "retail", "--storage", str(tmp_path), "--project", "demo-agent", "--model", "retail-seed0"])
    with pytest.raises(SystemExit):
        main(["--domain", "retail", "--storage", str(tmp_path), "--model", "retail-seed0"])
    assert "--storage needs --project" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--domain", "retail", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--baseline", "base"])
    assert "--baseline base needs --storage" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_steps"):  # before the checkpoint is looked for or a server starts
        main(["--domain", "retail", "--storage", str(tmp_path), "--project", "p", "--model", "m", "--max-steps", "1"])


@pytest.mark.vllm
@pytest.mark.slow
def test_the_command_serves_a_checkpoint_and_the_base_model_on_one_server_and_stops_it(
    envs, tiny_model_path, tmp_path, capsys, monkeypatch
):
    """--storage: one server started here serves the step, then the base model (step 0's weights), on the same
    tasks; the message cap is named as a departure from tau2's protocol, and the server is stopped at the end."""
    from art_core.envs.tau2.evaluation import main
    from art_core.inference.server import live_servers
    from art_core.storage import Storage
    from tests.deploy.conftest import write_checkpoint

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    storage = Storage(str(tmp_path / "art"))
    write_checkpoint(storage, "proj", "agent", 1, tiny_model_path, seed=3)
    before = set(live_servers())
    main(
        ["--domain", "retail", "--storage", storage.root, "--project", "proj", "--model", "agent"]
        + ["--base-model", tiny_model_path, "--baseline", "base", "--skip-judged", "--scenarios", "3"]
        + ["--trials", "1", "--max-tokens", "8", "--max-steps", "6"]
    )
    out = capsys.readouterr().out
    assert "serving proj/agent step 1 on" in out
    assert "| agent, all | 3 |" in out and "| base, all | 3 |" in out and "| never-acts, all | 3 |" in out
    assert "max_steps 6 (tau2: 200)" in out
    assert set(live_servers()) == before


def test_skip_judged_leaves_the_judged_tasks_out_of_every_split(envs, monkeypatch):
    """The environment option a run without an LLM judge trains and evaluates with (`make demo-agent` on tau2):
    no split holds a task whose reward would ask the judge."""
    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    plain = envs["retail"]
    skipping = expert.load_tau2_env("retail", skip_judged=True)
    for split in ("train", "test"):
        kept = [s.id for s in plain.scenarios(split) if not expert.needs_judge(s.data["task"])]
        assert [s.id for s in skipping.scenarios(split)] == kept and len(kept) < len(plain.scenarios(split))
    assert [s.id for s in skipping.scenarios("train")][:3] == ["0", "1", "6"]  # train 2-4 need the judge


def test_the_expert_is_a_baseline_on_tau2_made_per_task(envs, monkeypatch):
    """`expert_of` gives tau2 its expert made for each task from the gold actions, so the evaluation's ceiling row
    exists there too; a task needing the judge it cannot score counts as a failed try, not a crash."""
    from art_core.envs import load_environment
    from art_core.envs.experts import expert_of
    from art_core.envs.customer_service.policies import PerScenario
    from art_core.evaluate import EXPERT, evaluate_policy

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    env = envs["retail"]
    policy = expert_of(env)
    assert isinstance(policy, PerScenario)
    report, _ = asyncio.run(evaluate_policy(env, policy, EXPERT, split="train", scenarios=6, trials=1))
    got = report.per_scenario
    assert [got[i] for i in ("0", "1", "6")] == [[1.0]] * 3  # played to the end, as demonstrated
    assert [got[i] for i in ("2", "3", "4")] == [[]] * 3  # judged, no judge to score them: tries that failed
    assert report.by_category["write"].scenarios == 6 and report.headline.value == 0.5  # 3 of the 6 writes
    assert expert_of(load_environment("tic-tac-toe")) is None


def test_progress_gives_train_rollouts_partial_credit_and_evaluation_keeps_tau2s_reward(monkeypatch):
    """train_reward="progress": a train rollout's reward is partial credit (art_core.envs.tau2.reward.progress), so
    GRPO's groups can differ where tau2's all-or-nothing reward is 0 for every try; the expert still earns 1.0,
    a run that does nothing earns nothing on a write task, and evaluation reads tau2's reward on every split."""
    from art_core.envs.customer_service.policies import Call, PerScenario, Say, play_policy, policy_for
    from art_core.envs.experts import expert_of

    monkeypatch.delenv("ART_JUDGE_MODEL", raising=False)
    env = expert.load_tau2_env("retail", skip_judged=True, train_reward="progress", max_steps=30)
    train = env.scenarios("train")[:4]
    writes = [s.id for s in train if env.scenario_category(s) == "write"]
    assert writes
    for t in play_policy(env, train, expert_of(env)):
        assert t.reward == t.metrics["progress"] == t.metrics["task_reward"] == 1.0

    def stops_before_writing(scenario):  # the expert up to its first write, then declining to the end
        demonstrated = policy_for(expert_of(env), scenario)

        def play(opening):
            turns = demonstrated(opening)
            turn = next(turns)
            while not (isinstance(turn, Call) and turn.name in env.toolset.write_tools):
                turn = turns.send((yield turn))
            while True:
                yield Say("I'm sorry, I cannot make that change.")

        return play

    halfway = dict(zip([s.id for s in train], play_policy(env, train, PerScenario(stops_before_writing))))
    idle = dict(zip([s.id for s in train], play_policy(env, train, never_acts)))
    for i in writes:  # tau2's reward is 0 for both; progress tells finding the customer from doing nothing
        assert halfway[i].metrics["task_reward"] == 0.0 == idle[i].metrics["task_reward"]
        assert 0.0 < halfway[i].reward == halfway[i].metrics["progress"] < 1.0
        assert idle[i].reward == idle[i].metrics["progress"] < halfway[i].reward
    (tested,) = play_policy(env, env.scenarios("test")[:1], PerScenario(stops_before_writing))
    assert tested.reward == tested.metrics["task_reward"] == 0.0 < tested.metrics["progress"]  # tau2's reward
    evaluated = env.for_evaluation()
    assert evaluated.options.train_reward == "task" and env.for_evaluation() is not env
    assert expert.load_tau2_env("retail").for_evaluation().options.train_reward == "task"


def test_progress_credits_the_customer_found_the_writes_and_the_facts_apart():
    """The three parts of tau2's progress on a made-up task: finding the customer, the gold write (halved while
    the database differs), and the facts said; a part the task lacks is left out of the mean."""
    from art_core.envs.customer_service.domain import MadeCall as Call
    from art_core.envs.tau2.reward import GoldReplay, progress

    gold = GoldReplay(db={}, hash="h", user_ids=frozenset({"ava_1"}))
    writes = frozenset({"cancel_pending_order", "return_delivered_order_items"})
    cancel = {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}}
    found = Call("find_user_id_by_email", '{"email": "a@x"}', "ava_1", False)
    right = Call("cancel_pending_order", '{"reason": "no longer needed", "order_id": "#W1"}', "{}", False)
    refused = Call("cancel_pending_order", '{"order_id": "#W1", "reason": "no longer needed"}', "Error: no", True)
    said = [{"info": "100", "met": True}, {"info": "7", "met": False}]
    assert progress([cancel], writes, gold, [], 0.0, []) == 0.0
    assert progress([cancel], writes, gold, [found], 0.0, []) == 0.5
    assert progress([cancel], writes, gold, [found, refused], 0.0, []) == 0.5  # a refused call is no write
    assert progress([cancel], writes, gold, [found, right], 1.0, []) == 1.0
    assert progress([cancel], writes, gold, [found, right], 0.0, []) == 0.75  # an extra write left the db wrong
    assert progress([cancel], writes, gold, [found, right], 1.0, said) == pytest.approx(2.5 / 3)
    ret = {"name": "return_delivered_order_items", "arguments": {"order_id": "#W2", "item_ids": ["1", "2"]}}
    swapped = Call("return_delivered_order_items", '{"order_id": "#W2", "item_ids": ["2", "1"]}', "{}", False)
    assert progress([ret], writes, GoldReplay(db={}, hash="h"), [swapped], 1.0, []) == 1.0  # ids as a set
    assert progress([], writes, gold, [found], 1.0, said) == pytest.approx(2.5 / 3)  # no write asked: db kept
