"""Evaluate a served model on a split of an environment: mean reward, and pass^k over repeated attempts.

pass^k (tau-bench) is the chance that k attempts at the same scenario all succeed, estimated from n
attempts with c successes as C(c, k) / C(n, k), averaged over scenarios. It needs n >= k attempts per
scenario, so it is reported for k = 1..trials.

Where the environment tells task categories apart (`Environment.scenario_category`: the customer-service
environments, retail, airline, tau2), reward and pass^k are also reported per category (write / refuse /
answer), and the report's headline is pass^1 on tasks that need a write: a policy that never acts passes most
refusals, so the mean reward flatters it, but it scores 0 there. `evaluate_policy` evaluates an agent written
in code the same way, without a server: the `never_acts` baseline (the floor), and on retail and airline the
expert that writes the demonstrations (the ceiling under the evaluation's own limits: a task its expert cannot
finish within `max_turns` no model imitating it will).

    report = await evaluate_model(env, endpoint, "agent@3", split="val", scenarios=8, trials=4)
    report.reward, report.pass_k            # 0.41, {1: 0.5, 2: 0.31, 3: 0.22, 4: 0.16}
    report.by_category["write"].pass_k      # {1: 0.25, 2: 0.1, 3: 0.05, 4: 0.02}
    report.headline                         # Headline(metric='write pass^1', value=0.25, stderr=0.11)
    floor, _ = await evaluate_policy(env, never_acts, split="val", scenarios=8, trials=4)
    floor.headline.value                    # 0.0
    ceiling, _ = await evaluate_policy(env, expert_policy("retail"), EXPERT, split="val", scenarios=8, trials=1)
    ceiling.headline.value                  # 1.0 at the default max_turns; less where the limit cuts the expert
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any, Callable

from pydantic import Field, computed_field

from art_core.adapters import adapter_rank, load_checkpoint
from art_core.coroutines import run_sync
from art_core.envs.base import Environment, Scenario
from art_core.envs.customer_service.categories import CATEGORIES
from art_core.envs.customer_service.policies import (
    CannotDemonstrate,
    PerScenario,
    Policy,
    PolicyClient,
    never_acts,
    policy_for,
)
from art_core.envs.tool_use.episode import WRITES_WITHOUT_YES
from art_core.persisted import Persisted
from art_core.rollouts import RolloutSpec, reward_summary, rollout_groups
from art_core.serving import Endpoint
from art_core.storage import Storage
from art_core.store import ModelRef, baseline_eval_path
from art_core.trajectories import TrajectoryGroup


HEADLINE_CATEGORY = "write"  # where the environment has categories, the headline is pass^1 on these tasks
NEVER_ACTS = "never-acts"  # the name the never-acts baseline is reported under
EXPERT = "expert"  # the name the expert's evaluation (retail, airline, tau2) is reported under
UNASKED = WRITES_WITHOUT_YES  # the episode loop's metric: successful writes the customer had not agreed to


class CategoryScore(Persisted):
    """Reward and pass^k over the scenarios of one task category."""

    scenarios: int
    reward: float
    pass_k: dict[int, float] = Field(default_factory=dict)
    ids: list[str] = Field(
        default_factory=list,
        description="The scenarios summarized (keys of EvalReport.per_scenario), for standard errors and paired "
        "comparisons; empty in reports stored before it was kept.",
    )
    pass_1_with_yes: float | None = Field(
        default=None,
        description="pass^1 counting a try right only if it also made no write without the customer's yes "
        "(trajectory metric `writes_without_yes`). Task rewards check the database, not consent, and neither does "
        "tau2. None where the episodes do not count it.",
    )
    unasked: float | None = Field(
        default=None,
        description="The share of tries that made at least one write without the customer's yes; None where the "
        "episodes do not count it.",
    )


class Headline(Persisted):
    """The one figure an evaluation leads with."""

    metric: str = Field(description="'write pass^1' where the environment has task categories, else 'reward'.")
    value: float
    stderr: float | None = Field(
        default=None,
        description="Standard error of `value` across the scenarios it averages (a scenario's tries are not "
        "independent, so the scenario is the unit); None with fewer than 2 scenarios or in old reports.",
    )
    with_yes: float | None = Field(
        default=None,
        description="The same figure counting only tries that made no write without the customer's yes "
        "(CategoryScore.pass_1_with_yes); shown beside the headline, never in its place. None where not counted.",
    )

    def figure(self) -> str:
        """The value with its standard error, as reports print it: '0.153 ± 0.047'."""
        return f"{self.value:.3f}" + (f" ± {self.stderr:.3f}" if self.stderr is not None else "")

    def described(self) -> str:
        """The metric and its figure, with the consent-counted figure where there is one:
        'write pass^1 0.153 ± 0.047 (0.081 with a yes before every write)'."""
        consent = f" ({self.with_yes:.3f} with a yes before every write)" if self.with_yes is not None else ""
        return f"{self.metric} {self.figure()}{consent}"


class EvalReport(Persisted):
    """What one evaluation measured; stored as `eval/{step:04d}.json` (on val; `eval/{split}/{step:04d}.json` else)."""

    model: str = Field(description="The served name evaluated, e.g. agent@3 or the base model.")
    step: int
    split: str
    scenarios: int
    trials: int
    reward: float
    pass_k: dict[int, float] = Field(default_factory=dict, description="pass^k for k = 1..trials.")
    success_threshold: float = 1.0
    per_scenario: dict[str, list[float]] = Field(default_factory=dict, description="Rewards of each attempt.")
    seconds: float = 0.0
    settings: str = Field(
        "",
        description="What it ran under besides the weights (evaluation_settings): a fork reuses a copied evaluation "
        "only under the same.",
    )
    by_category: dict[str, CategoryScore] = Field(
        default_factory=dict,
        description="Reward and pass^k per task category (write / refuse / answer); empty where the "
        "environment has no categories.",
    )
    by_kind: dict[str, CategoryScore] = Field(
        default_factory=dict,
        description="Reward and pass^k per kind of task within the categories (`Environment.scenario_kind`: "
        "which writes a task needs); empty where the environment tells no kinds.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def headline(self) -> Headline:
        """pass^1 on tasks that need a write where there are such tasks (a do-nothing policy scores 0 there),
        else the mean reward. Stored with the report, so whoever reads the JSON sees the same figure."""
        write = self.by_category.get(HEADLINE_CATEGORY)
        if write is not None and 1 in write.pass_k:
            stderr = _stderr(self.scenario_values(write.ids, "pass^1")) if write.ids else None
            return Headline(
                metric=f"{HEADLINE_CATEGORY} pass^1",
                value=write.pass_k[1],
                stderr=stderr,
                with_yes=write.pass_1_with_yes,
            )
        return Headline(metric="reward", value=self.reward, stderr=_stderr(self.scenario_values(None, "reward")))

    def scenario_values(self, ids: list[str] | None, metric: str) -> dict[str, float]:
        """{scenario id: its share of tries right ("pass^1") or its mean reward ("reward")} for `ids` (None: all).

        A try that failed with an exception is stored without a reward and counts as not right, as in pass^k.
        """
        out: dict[str, float] = {}
        for sid in self.per_scenario if ids is None else ids:
            rewards = self.per_scenario.get(sid)
            if rewards is None:
                continue
            tries = max(len(rewards), self.trials)
            if metric == "pass^1":
                out[sid] = sum(r >= self.success_threshold for r in rewards) / tries if tries else 0.0
            elif rewards:
                out[sid] = sum(rewards) / len(rewards)
        return out


def paired_difference(after: EvalReport, before: EvalReport) -> tuple[float, float | None, int] | None:
    """The headline's change from `before` to `after` on the scenarios both scored, with its paired standard error.

    Returns (difference, stderr, scenarios), or None where the two headlines differ in metric or the reports share
    no scenario ids. Pairing by scenario removes the spread between easy and hard tasks, so the error is smaller
    than the two headlines' errors together.

    >>> a = EvalReport(model="a", step=1, split="val", scenarios=2, trials=1, reward=1.0, per_scenario={"x": [1.0], "y": [1.0]})
    >>> b = EvalReport(model="b", step=0, split="val", scenarios=2, trials=1, reward=0.5, per_scenario={"x": [1.0], "y": [0.0]})
    >>> paired_difference(a, b)
    (0.5, 0.5, 2)
    """
    h_after, h_before = after.headline, before.headline
    if h_after.metric != h_before.metric:
        return None
    if h_after.metric == "reward":
        ids, metric = None, "reward"
    else:
        write_after, write_before = after.by_category[HEADLINE_CATEGORY], before.by_category[HEADLINE_CATEGORY]
        both = set(write_before.ids)
        ids, metric = [i for i in write_after.ids if i in both], "pass^1"
    a, b = after.scenario_values(ids, metric), before.scenario_values(ids, metric)
    common = [i for i in a if i in b]
    if not common:
        return None
    diffs = {i: a[i] - b[i] for i in common}
    return sum(diffs.values()) / len(diffs), _stderr(diffs), len(diffs)


def _stderr(values: dict[str, float]) -> float | None:
    """Standard error of the mean of `values` (sample standard deviation / sqrt(n)); None below 2 values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values.values()) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values.values()) / (n - 1) / n)


def pass_hat_k(successes: int, attempts: int, k: int) -> float:
    """C(c, k) / C(n, k): the chance that k attempts drawn from n all succeed.

    >>> pass_hat_k(3, 4, 2)
    0.5
    """
    if not 1 <= k <= attempts:
        raise ValueError(f"pass^k needs 1 <= k <= attempts, got k={k} with {attempts} attempts")
    return math.comb(successes, k) / math.comb(attempts, k)


def pass_k_of(groups: list[TrajectoryGroup], trials: int, success_threshold: float = 1.0) -> dict[int, float]:
    """pass^k for k = 1..trials, averaged over the groups (one per scenario) that have k attempts or more.

    A failed attempt (kept as an exception in its group) counts as an attempt that did not succeed.

    >>> from art_core.trajectories import Trajectory
    >>> pass_k_of([TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)])], trials=2)
    {1: 0.5, 2: 0.0}
    """
    pass_k: dict[int, float] = {}
    for k in range(1, trials + 1):
        values = []
        for g in groups:
            attempts = len(g.trajectories) + len(g.exceptions)
            if attempts < k:
                continue
            ok = sum(1 for r in g.rewards() if r >= success_threshold)
            values.append(pass_hat_k(ok, attempts, k))
        if values:
            pass_k[k] = sum(values) / len(values)
    return pass_k


def eval_report(
    groups: list[TrajectoryGroup],
    *,
    model: str,
    step: int,
    split: str,
    trials: int,
    success_threshold: float = 1.0,
    categories: dict[str, str] | None = None,
    kinds: dict[str, str] | None = None,
) -> EvalReport:
    """An EvalReport from finished groups (one group per scenario, `trials` attempts in each).

    A failed attempt (kept as an exception in its group) counts as an attempt that did not succeed.
    `categories` maps scenario ids to task categories (`scenario_categories`); groups of each category are
    summarized apart in `by_category`, by the same arithmetic as the whole. `kinds` (`scenario_kinds`) does the
    same for `by_kind`.
    """
    per_scenario: dict[str, list[float]] = {}
    for g in groups:
        per_scenario[str(g.metadata.get("scenario_id", len(per_scenario)))] = g.rewards()
    by_category = _scores_by(groups, categories, trials, success_threshold)
    order = {c: i for i, c in enumerate(CATEGORIES)}  # write, refuse, answer; others after them by name
    by_category = dict(sorted(by_category.items(), key=lambda i: (order.get(i[0], len(order)), i[0])))
    return EvalReport(
        model=model,
        step=step,
        split=split,
        scenarios=len(groups),
        trials=trials,
        reward=reward_summary(groups)["reward"],
        pass_k=pass_k_of(groups, trials, success_threshold),
        success_threshold=success_threshold,
        per_scenario=per_scenario,
        by_category=by_category,
        by_kind=dict(sorted(_scores_by(groups, kinds, trials, success_threshold).items())),
    )


def _scores_by(
    groups: list[TrajectoryGroup], labels: dict[str, str] | None, trials: int, success_threshold: float
) -> dict[str, CategoryScore]:
    """Reward and pass^k over the groups of each label ({scenario id: label}); unlabelled groups are left out."""
    grouped: dict[str, list[TrajectoryGroup]] = {}
    for g in groups:
        label = (labels or {}).get(str(g.metadata.get("scenario_id")))
        if label is not None:
            grouped.setdefault(label, []).append(g)
    return {
        label: CategoryScore(
            scenarios=len(members),
            reward=reward_summary(members)["reward"],
            pass_k=pass_k_of(members, trials, success_threshold),
            ids=[str(g.metadata.get("scenario_id")) for g in members],
            **consent_scores(members, success_threshold),
        )
        for label, members in grouped.items()
    }


def consent_scores(groups: list[TrajectoryGroup], success_threshold: float = 1.0) -> dict[str, float | None]:
    """{"pass_1_with_yes": share of tries right that made no write without the customer's yes, "unasked": share of
    tries that made such a write}, over every try of `groups` (a failed try counts, as not right and not unasked).
    Both None where no trajectory counts `writes_without_yes` (environments without a customer who agrees).

    >>> from art_core.trajectories import Trajectory
    >>> ok, unasked = Trajectory(reward=1.0, metrics={UNASKED: 0}), Trajectory(reward=1.0, metrics={UNASKED: 1})
    >>> consent_scores([TrajectoryGroup([ok, unasked])])
    {'pass_1_with_yes': 0.5, 'unasked': 0.5}
    """
    tries = [t for g in groups for t in g.trajectories]
    if not any(UNASKED in t.metrics for t in tries):
        return {"pass_1_with_yes": None, "unasked": None}
    attempts = len(tries) + sum(len(g.exceptions) for g in groups)
    asked = [t for t in tries if not t.metrics.get(UNASKED)]
    right = sum(1 for t in asked if t.reward >= success_threshold)
    return {"pass_1_with_yes": right / attempts, "unasked": (len(tries) - len(asked)) / attempts}


def scenario_categories(env: Environment, scenarios: list[Scenario]) -> dict[str, str]:
    """{scenario id: category} for the scenarios the environment can categorize ({} for most environments)."""
    return _labels(env, "scenario_category", scenarios)


def scenario_kinds(env: Environment, scenarios: list[Scenario]) -> dict[str, str]:
    """{scenario id: kind} for the scenarios the environment tells a kind of (`Environment.scenario_kind`)."""
    return _labels(env, "scenario_kind", scenarios)


def _labels(env: Environment, method: str, scenarios: list[Scenario]) -> dict[str, str]:
    label = getattr(env, method, None)  # an environment need not subclass Environment
    if label is None:
        return {}
    return {s.id: v for s in scenarios if (v := label(s)) is not None}


def _for_evaluation(env: Environment) -> Environment:
    """The environment as evaluations play it (`Environment.for_evaluation`: the task reward on every split)."""
    evaluated = getattr(env, "for_evaluation", None)  # an environment need not subclass Environment
    return env if evaluated is None else evaluated()


def _chosen(env: Environment, split: str, scenarios: int) -> list[Scenario]:
    chosen = list(env.scenarios(env.check_split(split)))[:scenarios]
    if not chosen:
        raise ValueError(f"environment {env.name!r} has no {split!r} scenarios to evaluate on")
    return chosen


async def evaluate_model(
    env: Environment,
    endpoint: "Endpoint",
    model: str,
    *,
    step: int,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
    sampling: dict[str, Any] | None = None,
) -> tuple[EvalReport, list[TrajectoryGroup]]:
    """Roll out the first `scenarios` of `split`, `trials` times each, and summarize them, with the task reward
    on every split (`Environment.for_evaluation`).

    Returns the report and the groups (to store next to it).
    """
    env = _for_evaluation(env)
    chosen = _chosen(env, split, scenarios)
    t0 = time.perf_counter()
    groups = await rollout_groups(env, endpoint, model, chosen, trials, sampling=sampling, pbar_desc=f"eval {split}")
    report = eval_report(
        groups,
        model=model,
        step=step,
        split=split,
        trials=trials,
        success_threshold=success_threshold,
        categories=scenario_categories(env, chosen),
        kinds=scenario_kinds(env, chosen),
    )
    report.seconds = time.perf_counter() - t0
    return report, groups


async def evaluate_policy(
    env: Environment,
    policy: "Policy | PerScenario",
    name: str = NEVER_ACTS,
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> tuple[EvalReport, list[TrajectoryGroup]]:
    """`evaluate_model` for an agent written in code (`art_core.envs.customer_service.policies`): the same
    scenarios, episodes through the environment's own rollout, the same report, and no server.

    >>> report, _ = await evaluate_policy(load_environment("retail"), never_acts, scenarios=40, trials=3)  # doctest: +SKIP
    >>> report.headline, report.by_category["refuse"].reward                                                  # doctest: +SKIP
    (Headline(metric='write pass^1', value=0.0), 1.0)
    """
    env = _for_evaluation(env)
    chosen = _chosen(env, split, scenarios)
    t0 = time.perf_counter()
    groups = []
    for s in chosen:  # one at a time: a policy in code costs no server time, and the episodes are CPU-bound
        attempts: list[Any] = []
        for _ in range(trials):
            try:
                attempts.append(await env.rollout(PolicyClient(policy_for(policy, s)), name, s))
            except CannotDemonstrate as e:  # an expert that cannot play the task: a try that failed
                attempts.append(e)
        groups.append(TrajectoryGroup(attempts, metadata={"scenario_id": s.id, "split": s.split}))
    report = eval_report(
        groups,
        model=name,
        step=0,
        split=split,
        trials=trials,
        success_threshold=success_threshold,
        categories=scenario_categories(env, chosen),
        kinds=scenario_kinds(env, chosen),
    )
    report.seconds = time.perf_counter() - t0
    return report, groups


def evaluation_settings(
    rollout: RolloutSpec, split: str, scenarios: int, trials: int, success_threshold: float = 1.0
) -> str:
    """A digest of everything an evaluation's result depends on besides the weights: the environment and its
    options, the sampling, the split, the number of scenarios and tries, the success threshold.

    >>> spec = RolloutSpec(environment="retail", sampling={"temperature": 0.7})
    >>> evaluation_settings(spec, "val", 40, 3) == evaluation_settings(spec.model_copy(update={"seed": 2}), "val", 40, 3)
    True
    >>> evaluation_settings(spec, "val", 40, 3) == evaluation_settings(spec, "val", 40, 1)
    False
    """
    what = {
        "environment": rollout.environment,
        "env_options": rollout.env_options,
        "sampling": rollout.sampling,
        "split": split,
        "scenarios": scenarios,
        "trials": trials,
        "success_threshold": success_threshold,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def evaluate_step(
    ref: ModelRef,
    rollout: RolloutSpec,
    step: int,
    endpoint: "Callable[[int], Endpoint]",
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport:
    """Evaluate step `step` (0: the base model, as its zero adapter) and record it: `eval/{step}.json` (on val;
    `eval/{split}/{step}.json` on another split), the rollouts under `trajectories/{key}/`, and `{key}/reward`,
    `{key}/pass^k` in history.jsonl, where `key` is `evaluation_key(split)` (the split; `eval-train` on train).

    `endpoint(rank)` gives the server to sample from, able to serve adapters of LoRA rank `rank`.
    """
    store = ref.store()
    ep = endpoint(adapter_rank(store, step))
    served = load_checkpoint(ep, store, ref.base_model, step)
    report, groups = run_sync(
        evaluate_model(
            rollout.load_environment(),
            ep,
            served,
            step=step,
            split=split,
            scenarios=scenarios,
            trials=trials,
            success_threshold=success_threshold,
            sampling=rollout.sampling,
        )
    )
    report.settings = evaluation_settings(rollout, split, scenarios, trials, success_threshold)
    store.write_eval(step, report.model_dump(mode="json"), split)
    key = evaluation_key(split)
    store.write_groups(store.trajectories(key, step), groups)
    store.record(step, eval_metrics(report), prefix=f"{key}/")
    return report


def evaluation_key(split: str) -> str:
    """The name an evaluation on `split` is kept under, in trajectories/ and in history.jsonl: the split itself,
    but `eval-train` for train, whose own names hold what a step gathered and trained on (its rollouts in
    trajectories/train/, its train/* record), which an evaluation must not replace.

    >>> evaluation_key("val"), evaluation_key("test"), evaluation_key("train")
    ('val', 'test', 'eval-train')
    """
    return "eval-train" if split == "train" else split


def eval_metrics(report: EvalReport) -> dict[str, float]:
    """The history.jsonl figures of an evaluation: `{key}/reward`, `{key}/pass^k`, and per task category
    `{key}/{category}/reward` and `{key}/{category}/pass^k`, with `key` = evaluation_key(the split).

    >>> eval_metrics(EvalReport(model="m", step=1, split="val", scenarios=1, trials=1, reward=0.5, pass_k={1: 0.0}))
    {'val/reward': 0.5, 'val/pass^1': 0.0}
    """
    key = evaluation_key(report.split)
    metrics = {f"{key}/reward": report.reward}
    metrics.update({f"{key}/pass^{k}": v for k, v in report.pass_k.items()})
    for category, score in report.by_category.items():
        metrics[f"{key}/{category}/reward"] = score.reward
        metrics.update({f"{key}/{category}/pass^{k}": v for k, v in score.pass_k.items()})
    return metrics


def evaluate_baseline(
    storage_url: str,
    project: str,
    endpoint: "Endpoint",
    model: str,
    rollout: RolloutSpec,
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport:
    """The same evaluation for a prompted model (a hosted one, or a base model on any server), stored under
    `{project}/baselines/{model}/eval-{split}.json`."""
    report, _ = run_sync(
        evaluate_model(
            rollout.load_environment(),
            endpoint,
            model,
            step=0,
            split=split,
            scenarios=scenarios,
            trials=trials,
            success_threshold=success_threshold,
            sampling=rollout.sampling,
        )
    )
    return _store_baseline(storage_url, project, model, split, report)


def never_acts_baseline(
    storage_url: str,
    project: str,
    rollout: RolloutSpec,
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport:
    """The never-acts baseline (no tool call, every turn a polite refusal) on the same scenarios as
    `evaluate_step`, stored under `{project}/baselines/never-acts-{environment}/eval-{split}.json`.

    >>> never_acts_baseline("/tmp/art", "demo", RolloutSpec(environment="retail"), scenarios=40).headline  # doctest: +SKIP
    Headline(metric='write pass^1', value=0.0)
    """
    env = rollout.load_environment()
    return _policy_baseline(
        storage_url, project, env, never_acts, NEVER_ACTS, split, scenarios, trials, success_threshold
    )


def expert_baseline(
    storage_url: str,
    project: str,
    rollout: RolloutSpec,
    *,
    split: str = "val",
    scenarios: int = 8,
    trials: int = 1,
    success_threshold: float = 1.0,
) -> EvalReport | None:
    """The domain's expert (the code that writes the demonstrations) on the same scenarios as `evaluate_step`,
    under the same environment options (max_turns above all), stored under
    `{project}/baselines/expert-{environment}/eval-{split}.json`; None for an environment without an expert.
    What it fails under these limits no model trained to imitate it will pass: the ceiling of the evaluation.

    >>> expert_baseline("/tmp/art", "demo", RolloutSpec(environment="retail", env_options={"max_turns": 10}),
    ...                 scenarios=40).by_category["write"].pass_k[1]                         # doctest: +SKIP
    0.8333333333333334
    """
    from art_core.envs.experts import expert_of

    env = rollout.load_environment()
    policy = expert_of(env)
    if policy is None:
        return None
    return _policy_baseline(storage_url, project, env, policy, EXPERT, split, scenarios, trials, success_threshold)


def _policy_baseline(
    storage_url: str,
    project: str,
    env: Environment,
    policy: Policy | PerScenario,
    name: str,
    split: str,
    scenarios: int,
    trials: int,
    success_threshold: float,
) -> EvalReport:
    """A policy in code evaluated as `evaluate_policy` does, stored under `{project}/baselines/{name}-{env}/`."""
    report, _ = run_sync(
        evaluate_policy(
            env, policy, name, split=split, scenarios=scenarios, trials=trials, success_threshold=success_threshold
        )
    )
    return _store_baseline(storage_url, project, f"{name}-{env.name}", split, report)


def _store_baseline(storage_url: str, project: str, name: str, split: str, report: EvalReport) -> EvalReport:
    """Write a baseline's report to `{project}/baselines/{name}/eval-{split}.json`; returns the report."""
    storage = Storage(storage_url)
    storage.write_json(baseline_eval_path(storage, project, name, split), report.model_dump(mode="json"))
    return report
