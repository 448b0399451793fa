"""The coded experts of the shipped customer-service environments, by environment name: the generated `retail` and
`airline` (`art_core.envs.customer_service.expert`: a policy per domain that reads only the conversation) and
tau2-bench's `tau2-retail` and `tau2-airline` (`art_core.envs.tau2.expert`: one made per task from its gold actions).
What the pipeline and the evaluations ask of any of them goes through here: their demonstrations, the digest those
are cached on, and the expert as a policy in code.

    >>> "tau2-retail" in DEMONSTRATED and "tic-tac-toe" not in DEMONSTRATED
    True
    >>> demos = build_demonstrations("tau2-retail", limit=4, options={"skip_judged": True})   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from art_core.envs.base import Split
from art_core.envs.customer_service import expert as generated
from art_core.envs.customer_service.policies import PerScenario, Policy

TAU2_EXPERTS = {"tau2-retail": "retail", "tau2-airline": "airline"}  # environment -> tau2's domain
DEMONSTRATED = (*generated.EXPERTS, *TAU2_EXPERTS)  # the environments whose experts play demonstrations

# the tau2 options its demonstrations depend on: its data, its judge, the judged tasks left out or not. Not the
# customer (always the scripted one) nor a run's limits: the expert plays under tau2's own, as the generated
# domains' expert plays under its own MAX_TURNS whatever a run's max_turns, so a cap meant for the model cuts no
# demonstration short.
_TAU2_DEMONSTRATION_OPTIONS = ("data_dir", "judge", "skip_judged")


def expert_of(env: Any) -> Policy | PerScenario | None:
    """The expert that plays `env`'s scenarios: its domain's (retail, airline), tau2's made per task from the
    task's gold actions (tau2-retail, tau2-airline), or None for an environment without one."""
    if env.name in generated.EXPERTS:
        return generated.expert_policy(env.name)
    if env.name in TAU2_EXPERTS:
        from art_core.envs.tau2.expert import tau2_expert

        return PerScenario(lambda scenario: tau2_expert(env, scenario))
    return None


def expert_fingerprint(environment: str) -> str:
    """A digest of the code and text `environment`'s demonstrations come from (`generated.expert_fingerprint`; for
    tau2 its package, whose data is the installed registry package's): the pipeline caches demonstrations on it.

    >>> len(expert_fingerprint("tau2-airline"))
    12
    """
    if environment in TAU2_EXPERTS:
        return generated.shared_digest("tau2")
    return generated.expert_fingerprint(environment)


def demonstration_options(environment: str, options: dict[str, Any]) -> dict[str, Any]:
    """What of an environment's `options` its demonstrations depend on: nothing for retail and airline (their
    expert plays with the scripted customer and its own turn limit; the seed is passed on its own), tau2's data
    folder, judge and `skip_judged` for tau2-retail and tau2-airline.

    >>> demonstration_options("retail", {"seed": 0, "max_turns": 10, "train_reward": "progress"})
    {}
    >>> demonstration_options("tau2-retail", {"user": "scripted", "max_steps": 30, "skip_judged": True})
    {'skip_judged': True}
    """
    if environment not in TAU2_EXPERTS:
        return {}
    return {k: v for k, v in options.items() if k in _TAU2_DEMONSTRATION_OPTIONS}


def build_demonstrations(
    environment: str,
    split: Split = "train",
    *,
    seed: int = 0,
    limit: int | None = None,
    out: str | Path | None = None,
    options: dict[str, Any] | None = None,
) -> generated.Demonstrations:
    """`environment`'s expert demonstrations of `split` (the first `limit` scenarios), kept where the environment
    scores them 1.0: `generated.build_demonstrations` for retail and airline (`seed` picks the database), tau2's
    `build_tau2_demonstrations` on tau2's own tools for tau2-retail and tau2-airline, with the `options` that
    `demonstration_options` keeps."""
    if environment in TAU2_EXPERTS:
        from art_core.envs.tau2.expert import build_tau2_demonstrations

        kept = demonstration_options(environment, options or {})
        return build_tau2_demonstrations(TAU2_EXPERTS[environment], split, limit=limit, out=out, **kept)
    return generated.build_demonstrations(environment, split, seed=seed, limit=limit, out=out)
