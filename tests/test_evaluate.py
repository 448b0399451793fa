"""pass^k and the evaluation summary: the figures a user compares steps by, as a whole and per task category."""

import pytest

from art_core.evaluate import (
    EvalReport,
    eval_metrics,
    eval_report,
    pass_hat_k,
    scenario_categories,
    scenario_kinds,
)
from art_core.trajectories import RolloutError, Trajectory, TrajectoryGroup


def test_pass_hat_k_is_the_chance_that_k_draws_all_succeed():
    assert pass_hat_k(3, 4, 1) == 0.75
    assert pass_hat_k(3, 4, 2) == 0.5  # C(3,2)/C(4,2) = 3/6
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(3, 4, 4) == 0.0
    with pytest.raises(ValueError, match="k <= attempts"):
        pass_hat_k(1, 2, 3)


def _group(scenario, rewards, failed=0):
    errors = [RolloutError(type="RuntimeError", message="boom", traceback="") for _ in range(failed)]
    return TrajectoryGroup(
        [Trajectory(reward=r) for r in rewards], exceptions=errors, metadata={"scenario_id": scenario}
    )


def test_summarize_averages_over_scenarios_and_counts_failures_as_misses():
    groups = [_group("a", [1.0, 1.0, 0.0, 1.0]), _group("b", [1.0, 0.0], failed=2)]
    report = eval_report(groups, model="agent@3", step=3, split="val", trials=4)
    assert report.reward == pytest.approx(4 / 6)
    assert report.pass_k[1] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert report.pass_k[2] == pytest.approx((3 / 6 + 0 / 6) / 2)
    assert report.per_scenario == {"a": [1.0, 1.0, 0.0, 1.0], "b": [1.0, 0.0]}


def test_success_threshold_decides_what_passes():
    groups = [_group("a", [0.5, 0.5])]
    assert eval_report(groups, model="m", step=0, split="val", trials=2).pass_k[1] == 0.0
    assert eval_report(groups, model="m", step=0, split="val", trials=2, success_threshold=0.5).pass_k[1] == 1.0


# ---- task categories: the headline a do-nothing policy cannot pass ----------------------------------------------


def test_pass_k_per_category_from_known_outcomes():
    groups = [
        _group("w1", [1.0, 1.0, 0.0]),  # write: 2 of 3 right
        _group("w2", [0.0, 0.0], failed=1),  # write: 0 of 3 (a failed attempt is a miss)
        _group("r1", [1.0, 1.0, 1.0]),  # refuse: 3 of 3
        _group("a1", [1.0, 0.0, 0.0]),  # answer: 1 of 3
        _group("x1", [0.5, 0.5, 0.5]),  # not categorized: in the whole only
    ]
    categories = {"w1": "write", "w2": "write", "r1": "refuse", "a1": "answer"}
    report = eval_report(groups, model="m", step=1, split="val", trials=3, categories=categories)
    assert list(report.by_category) == ["write", "refuse", "answer"]
    write = report.by_category["write"]
    assert write.scenarios == 2 and write.reward == pytest.approx(2 / 5)  # rewards of the 5 finished attempts
    assert write.pass_k[1] == pytest.approx((2 / 3 + 0) / 2)
    assert write.pass_k[2] == pytest.approx((1 / 3 + 0) / 2)  # C(2,2)/C(3,2)
    assert write.pass_k[3] == 0.0
    assert report.by_category["refuse"].pass_k == {1: 1.0, 2: 1.0, 3: 1.0}
    assert report.by_category["answer"].pass_k == pytest.approx({1: 1 / 3, 2: 0.0, 3: 0.0})
    assert report.scenarios == 5 and report.pass_k[1] == pytest.approx((2 / 3 + 0 + 1 + 1 / 3 + 0) / 5)
    assert report.headline.metric == "write pass^1" and report.headline.value == pytest.approx(1 / 3)


def test_tries_right_per_kind_of_write_task_in_the_report():
    """A report tells which writes a model gets right (returns) and which it never does (exchanges); a report
    stored before kinds existed still renders, without that table."""
    from art_core.reporting import eval_markdown

    groups = [
        _group("r1", [1.0, 0.0, 1.0]),
        _group("r2", [0.0, 0.0, 1.0]),
        _group("e1", [0.0, 0.0], failed=1),
        _group("n1", [1.0, 1.0, 1.0]),  # a refusal: no kind
    ]
    categories = {"r1": "write", "r2": "write", "e1": "write", "n1": "refuse"}
    kinds = {"r1": "return", "r2": "return", "e1": "exchange"}
    report = eval_report(groups, model="m@4", step=4, split="val", trials=3, categories=categories, kinds=kinds)
    assert list(report.by_kind) == ["exchange", "return"]
    assert report.by_kind["return"].scenarios == 2 and report.by_kind["return"].pass_k[1] == pytest.approx(1 / 2)
    assert report.by_kind["exchange"].pass_k == {1: 0.0, 2: 0.0, 3: 0.0}
    old = report.model_dump(mode="json")
    del old["by_kind"]
    old["model"], old["step"] = "m@2", 2
    md = eval_markdown([old, report], title="m on val")
    assert "## Per kind of write task" in md
    assert "| return | 2 | - | 3/6 (0.500) |" in md and "| exchange | 1 | - | 0/3 (0.000) |" in md
    assert "Per kind" not in eval_markdown([old], title="m on val")


def test_a_write_the_customer_did_not_agree_to_is_counted_beside_the_headline_not_in_it():
    """The task reward checks the database, not consent: a right try that wrote without the customer's yes keeps
    its place in the headline, and the report shows apart how many such tries there were and what the headline
    would be without them. A report stored before that was counted still renders, with '-'."""
    from art_core.reporting import eval_markdown

    def tries(scenario, outcomes, failed=0):  # outcomes: (reward, writes_without_yes) per finished try
        group = _group(scenario, [r for r, _ in outcomes], failed)
        for t, (_, unasked) in zip(group.trajectories, outcomes):
            t.metrics["writes_without_yes"] = unasked
        return group

    groups = [
        tries("w1", [(1.0, 0), (1.0, 1), (0.0, 2)]),  # right and asked, right but unasked, wrong and unasked
        tries("w2", [(1.0, 0), (0.0, 0)], failed=1),
        tries("r1", [(1.0, 0), (1.0, 0), (1.0, 0)]),  # a refusal: nothing written
    ]
    categories = {"w1": "write", "w2": "write", "r1": "refuse"}
    report = eval_report(groups, model="m@2", step=2, split="val", trials=3, categories=categories)
    write = report.by_category["write"]
    assert write.pass_k[1] == pytest.approx(3 / 6)  # the headline is the task reward's, unchanged
    assert write.pass_1_with_yes == pytest.approx(2 / 6) and write.unasked == pytest.approx(2 / 6)
    assert report.by_category["refuse"].pass_1_with_yes == 1.0 and report.by_category["refuse"].unasked == 0.0
    h = EvalReport.model_validate_json(report.model_dump_json()).headline
    assert h.value == pytest.approx(0.5) and h.with_yes == pytest.approx(1 / 3)
    assert (
        h.described().startswith("write pass^1 0.500 ± ") and "(0.333 with a yes before every write)" in h.described()
    )

    old = report.model_dump(mode="json")
    for score in old["by_category"].values():
        del score["pass_1_with_yes"], score["unasked"]
    old["model"], old["step"] = "m@1", 1
    md = eval_markdown([old, report], title="m on val")
    assert "| model | category | scenarios | reward | pass^1 | pass^2 | pass^3 | pass^1 with yes | unasked |" in md
    assert "| m@2 | write | 2 | 0.600 | 0.500 | 0.167 | 0.000 | 0.333 | 0.333 |" in md
    assert "| m@1 | write | 2 | 0.600 | 0.500 | 0.167 | 0.000 | - | - |" in md
    assert EvalReport.model_validate(old).headline.with_yes is None
    assert "pass^1 with yes" not in eval_markdown([old], title="m on val")  # nothing counted: no such columns

    plain = eval_report([_group("a", [1.0])], model="m", step=0, split="val", trials=1)  # no customer to agree
    assert plain.headline.with_yes is None and plain.headline.described() == "reward 1.000"


def test_the_headline_carries_its_standard_error_and_a_gain_its_paired_one():
    """Tries of one task are not independent, so the error runs across tasks; comparing two steps task by task
    removes the spread between easy and hard tasks. Both reach the report a user reads."""
    from art_core.evaluate import paired_difference
    from art_core.reporting import eval_markdown

    categories = {"w1": "write", "w2": "write", "w3": "write", "w4": "write", "r1": "refuse"}

    def report(step, rights):  # rights: tries right of 2 at w1..w4
        groups = [_group(f"w{i + 1}", [1.0] * n + [0.0] * (2 - n)) for i, n in enumerate(rights)]
        groups.append(_group("r1", [1.0, 1.0]))
        return eval_report(groups, model=f"m@{step}", step=step, split="val", trials=2, categories=categories)

    before, after = report(0, [0, 1, 0, 2]), report(1, [1, 2, 0, 2])  # pass^1 0.375 -> 0.625
    h = before.headline
    per_task = [0.0, 0.5, 0.0, 1.0]  # sample sd 0.4787 over 4 tasks
    sd = (sum((v - 0.375) ** 2 for v in per_task) / 3) ** 0.5
    assert (h.value, h.stderr) == (pytest.approx(0.375), pytest.approx(sd / 2))
    gain, stderr, tasks = paired_difference(after, before)  # differences 0.5, 0.5, 0, 0
    assert (gain, stderr, tasks) == (pytest.approx(0.25), pytest.approx(0.5 / 3**0.5 / 2), 4)
    assert stderr < (after.headline.stderr**2 + h.stderr**2) ** 0.5  # pairing is the tighter comparison
    md = eval_markdown([after], title="m", baseline=before)
    assert f"| **0.625** ± {after.headline.stderr:.3f} |" in md
    assert f"Last step vs baseline: +0.250 write pass^1 (± {stderr:.3f} paired over 4 tasks)" in md
    old = after.model_dump(mode="json")  # stored before ids were kept: no error to show, rendered as before
    for score in old["by_category"].values():
        del score["ids"]
    assert EvalReport.model_validate(old).headline.stderr is None
    assert "Last step vs baseline: +0.250 write pass^1, " in eval_markdown([old], title="m", baseline=before)


def _two_tries(rewards: dict[str, list[float]], categories: dict[str, str], model: str = "m", step: int = 2):
    """A report of 2 tries per scenario from {scenario id: its rewards}."""
    groups = [_group(sid, r) for sid, r in rewards.items()]
    return eval_report(groups, model=model, step=step, split="val", trials=2, categories=categories)


def test_headline_is_the_reward_without_categories_and_survives_json():
    plain = eval_report([_group("a", [1.0, 0.0])], model="m", step=0, split="val", trials=2)
    assert plain.by_category == {} and (plain.headline.metric, plain.headline.value) == ("reward", 0.5)
    report = _two_tries({"w": [1.0, 0.0], "r": [1.0, 1.0]}, {"w": "write", "r": "refuse"})
    stored = report.model_dump(mode="json")  # what eval/{step}.json and the baselines hold
    assert stored["headline"] == {"metric": "write pass^1", "value": 0.5, "stderr": None, "with_yes": None}  # one task
    assert EvalReport.model_validate(stored) == report  # read back, as flows/reporting does
    assert eval_metrics(report) == {
        "val/reward": 0.75,
        "val/pass^1": 0.75,
        "val/pass^2": 0.5,
        "val/write/reward": 0.5,
        "val/write/pass^1": 0.5,
        "val/write/pass^2": 0.0,
        "val/refuse/reward": 1.0,
        "val/refuse/pass^1": 1.0,
        "val/refuse/pass^2": 1.0,
    }
    # on the train split the figures go under eval-train/: train/* is the record of what the step trained on
    on_train = eval_metrics(report.model_copy(update={"split": "train"}))
    assert on_train["eval-train/write/pass^1"] == 0.5 and not any(k.startswith("train/") for k in on_train)


def test_customer_service_environments_tell_categories_apart():
    from art_core.envs import load_environment

    for name in ("retail", "airline", "tau2-retail"):
        env = load_environment(name)
        split = "test" if name.startswith("tau2") else "val"
        cats = scenario_categories(env, env.scenarios(split))
        assert set(cats.values()) == {"write", "refuse", "answer"}, name
    tau2 = load_environment("tau2-retail")
    (five,) = [s for s in tau2.scenarios("test") if s.id == "5"]  # returns a delivered item: a write
    assert tau2.scenario_category(five) == "write"
    assert "return_delivered_order_items" in tau2.scenario_kind(five)
    for name, split in (("retail", "val"), ("airline", "val"), ("tau2-retail", "test")):
        env = load_environment(name)
        scenarios = env.scenarios(split)
        kinds = scenario_kinds(env, scenarios)  # exactly the write tasks have a kind
        assert set(kinds) == {s.id for s in scenarios if env.scenario_category(s) == "write"}, name
    quiz = load_environment("word-quiz")
    assert scenario_categories(quiz, quiz.scenarios("val")) == {}


@pytest.mark.parametrize(
    "name,categories", [("retail", {"write", "refuse"}), ("airline", {"write", "answer"})]
)  # what the first 12 val scenarios hold
def test_never_acts_scores_zero_on_write_tasks_through_the_evaluation(name, categories, tmp_path):
    """The do-nothing policy played through the environment (no server), summarized and stored as a model's
    evaluation is (evaluate_policy under never_acts_baseline, the Prefect task's library call)."""
    from art_core.evaluate import never_acts_baseline
    from art_core.rollouts import RolloutSpec
    from art_core.storage import Storage

    report = never_acts_baseline(str(tmp_path), "p", RolloutSpec(environment=name), split="val", scenarios=12, trials=2)
    assert report.model == "never-acts" and report.scenarios == 12 and report.trials == 2
    write = report.by_category["write"]
    assert write.scenarios > 0 and write.reward == 0.0 and write.pass_k == {1: 0.0, 2: 0.0}
    assert (report.headline.metric, report.headline.value) == ("write pass^1", 0.0)
    assert set(report.by_category) == categories
    if "refuse" in categories:  # why the mean reward flatters it
        assert report.by_category["refuse"].pass_k[1] == 1.0 and report.reward > 0.0
    # which writes the write tasks need: every one of them has a kind, and never-acts gets none right
    from art_core.envs import load_environment

    writes = load_environment(name).domain.write_tools
    assert sum(k.scenarios for k in report.by_kind.values()) == write.scenarios
    assert all(set(kind.split(" + ")) <= writes and k.pass_k[1] == 0.0 for kind, k in report.by_kind.items())
    saved = Storage(str(tmp_path)).read_json(f"{tmp_path}/p/baselines/never-acts-{name}/eval-val.json")
    assert EvalReport.model_validate(saved).by_category == report.by_category
    assert EvalReport.model_validate(saved).by_kind == report.by_kind
    assert saved["headline"] == {"metric": "write pass^1", "value": 0.0, "stderr": 0.0, "with_yes": 0.0}
    assert all(score.unasked == 0.0 for score in report.by_category.values())  # it writes nothing, asked or not


def test_the_expert_shows_what_the_turn_limit_leaves_within_reach(tmp_path):
    """The ceiling row: the expert that writes the demonstrations, played under the evaluation's own options. With
    room it passes every task; with max_turns too short for its writes it fails them, and a model imitating it
    would too. Stored beside the never-acts baseline; environments without an expert have no such row."""
    from art_core.evaluate import expert_baseline
    from art_core.rollouts import RolloutSpec
    from art_core.storage import Storage

    roomy = expert_baseline(str(tmp_path), "p", RolloutSpec(environment="retail"), scenarios=12, trials=2)
    assert roomy.model == "expert" and roomy.headline.value == 1.0 and roomy.reward == 1.0
    assert roomy.headline.with_yes == 1.0  # it asks before every write
    tight = RolloutSpec(environment="retail", env_options={"max_turns": 4})
    cut = expert_baseline(str(tmp_path), "p", tight, scenarios=12, trials=2)
    assert cut.headline.value < 1.0 and cut.by_category["write"].scenarios == roomy.by_category["write"].scenarios
    saved = Storage(str(tmp_path)).read_json(f"{tmp_path}/p/baselines/expert-retail/eval-val.json")
    assert EvalReport.model_validate(saved).headline == cut.headline  # the latest call's options
    assert expert_baseline(str(tmp_path), "p", RolloutSpec(environment="word-quiz"), scenarios=2) is None


def test_a_report_pickled_before_a_field_was_added_reads_back_with_its_default():
    """Prefect keeps cached evaluations pickled: one cached by an older version (a CategoryScore without `ids`)
    still renders after an upgrade, without the standard error it could not know."""
    import pickle

    import cloudpickle

    from art_core.reporting import eval_markdown

    report = _two_tries({"w1": [1.0, 0.0], "w2": [0.0, 0.0]}, {"w1": "write", "w2": "write"}, model="m@1", step=1)
    for score in report.by_category.values():
        del score.__dict__["ids"]  # as the older class pickled it
    for dumps in (pickle.dumps, cloudpickle.dumps):
        old = pickle.loads(dumps(report))
        assert old.by_category["write"].ids == [] and old.headline.stderr is None
        assert "| m@1 | 1 | val | 2 x 2 | **0.250** |" in eval_markdown([old], title="m")
