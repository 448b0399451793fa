"""Run a deployment with a few fields changed, the rest from the deployment's own `config`.

Prefect merges run parameters with a deployment's only at the top level: `prefect deployment run
train/train --param config='{"steps": 5}'` replaces the deployment's whole `config`, so everything it
set (environment options, learning rate, ...) silently falls back to the code defaults. This module
merges field by field instead:

    python -m flows.overrides train/train steps=5 train.learning_rate=0.01 environment.options.seed=2

    from art_pipeline.flows.overrides import run_with_overrides
    run_with_overrides("train/train", {"steps": 5, "train": {"learning_rate": 0.01}})

and `warn_if_config_replaced()`, called first in a flow, logs a warning naming the fields a run's
config left out that its deployment sets (the run still goes ahead with the defaults: that may be meant).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override` laid over it, nested dicts merged key by key (lists and scalars replaced).

    >>> deep_merge({"steps": 3, "train": {"learning_rate": 0.002, "old_logprobs": "recompute"}}, {"train": {"learning_rate": 0.01}})
    {'steps': 3, 'train': {'learning_rate': 0.01, 'old_logprobs': 'recompute'}}
    """
    out = dict(base)
    for key, value in override.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`["steps=5", "train.learning_rate=0.01", "environment.name=retail"]` as a nested dict; values are
    read as JSON where they parse (5, 0.01, true, null, [..], {..}) and kept as text otherwise.

    >>> parse_assignments(["steps=5", "train.learning_rate=1e-2", "environment.name=retail"])
    {'steps': 5, 'train': {'learning_rate': 0.01}, 'environment': {'name': 'retail'}}
    """
    out: dict[str, Any] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"{item!r} is not field=value (e.g. steps=5 or train.learning_rate=0.01)")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *parents, leaf = path.strip().split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{item!r}: {part!r} was given a value above, it cannot also have fields")
        node[leaf] = value
    return out


def missing_fields(defaults: dict[str, Any], given: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields `defaults` sets that `given` leaves out, at any depth.

    >>> missing_fields({"steps": 3, "train": {"learning_rate": 0.002}, "eval_every": 3}, {"steps": 5, "train": {}})
    ['train.learning_rate', 'eval_every']
    """
    out: list[str] = []
    for key, value in defaults.items():
        name = f"{prefix}{key}"
        if key not in given:
            out.append(name)
        elif isinstance(value, dict) and isinstance(given[key], dict):
            out += missing_fields(value, given[key], prefix=f"{name}.")
    return out


def warn_if_config_replaced(parameter: str = "config") -> list[str]:
    """Call first in a flow: when this run came from a deployment and its `parameter` leaves out fields
    the deployment sets, log a warning naming them (with the deployment's values) and return their names.

    Returns [] outside a deployment run, or when the run kept every field (the usual "Custom run" form).

    >>> from prefect import flow
    >>> from art_pipeline.flows.config import RunConfig
    >>> @flow
    ... def train(config: RunConfig):
    ...     warn_if_config_replaced()
    >>> warn_if_config_replaced()                 # outside a deployment run
    []
    """
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.logging import get_run_logger

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or ctx.flow_run.deployment_id is None:
        return []
    with get_client(sync_client=True) as client:
        # The API holds the parameters as sent (JSON); the context holds them already validated.
        run = client.read_flow_run(ctx.flow_run.id)
        deployment = client.read_deployment(ctx.flow_run.deployment_id)
        flow_name = client.read_flow(deployment.flow_id).name
    defaults, given = (deployment.parameters or {}).get(parameter), (run.parameters or {}).get(parameter)
    if not isinstance(defaults, dict) or not isinstance(given, dict):
        return []
    missing = missing_fields(defaults, given)
    if missing:
        shown = ", ".join(f"{m} (deployment: {json.dumps(_at(defaults, m))})" for m in missing[:12])
        more = f" and {len(missing) - 12} more" if len(missing) > 12 else ""
        get_run_logger().warning(
            f"this run's {parameter} replaced the deployment's whole {parameter}: {len(missing)} fields the deployment "
            f"sets fall back to the code defaults: {shown}{more}. Prefect does not merge nested parameters; to change "
            f"a few fields, use Custom run in the UI (it starts from the deployment's values) or "
            f"`python -m flows.overrides {flow_name}/{deployment.name} field=value ...`."
        )
    return missing


def run_with_overrides(
    deployment: str, overrides: dict[str, Any], parameter: str = "config", timeout: float | None = 0, **kwargs: Any
):
    """Start `deployment` ("flow/deployment") with its own `parameter` merged with `overrides`; returns the FlowRun.

    `timeout=0` returns as soon as the run is scheduled; None waits for it to finish. Other keyword
    arguments go to prefect.deployments.run_deployment (flow_run_name, tags, ...).

    >>> run_with_overrides("train/train", {"steps": 5})      # a Prefect server with the deployment  # doctest: +SKIP
    FlowRun(...)
    """
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    with get_client(sync_client=True) as client:
        found = client.read_deployment_by_name(deployment)
    base = (found.parameters or {}).get(parameter)
    if not isinstance(base, dict):
        raise ValueError(f"deployment {deployment!r} has no {parameter!r} parameter to merge into")
    return run_deployment(deployment, parameters={parameter: deep_merge(base, overrides)}, timeout=timeout, **kwargs)


def _at(tree: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def main(argv: list[str] | None = None) -> None:
    """`python -m flows.overrides DEPLOYMENT field=value ...`: start a run with those fields changed."""
    p = argparse.ArgumentParser(prog="python -m flows.overrides", description=main.__doc__)
    p.add_argument("deployment", help='flow/deployment, e.g. "train/train"')
    p.add_argument("assignments", nargs="*", help="field=value, dotted for nested fields: train.learning_rate=0.01")
    p.add_argument("--parameter", default="config", help="the deployment's parameter to merge into")
    p.add_argument("--name", default=None, help="flow run name")
    p.add_argument("--watch", action="store_true", help="wait for the run to finish")
    args = p.parse_args(argv)
    overrides = parse_assignments(args.assignments)
    run = run_with_overrides(
        args.deployment, overrides, parameter=args.parameter, timeout=None if args.watch else 0, flow_run_name=args.name
    )
    print(
        f"flow run {run.name} ({run.id}): {run.state.name if run.state else 'scheduled'}; changed {json.dumps(overrides)}"
    )


if __name__ == "__main__":
    main()
