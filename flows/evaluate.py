"""The evaluate flow: steps of a trained model on a split, next to a baseline (by default the base model).

    from art_pipeline.flows.evaluate import evaluate_flow
    evaluate_flow(EvaluateConfig(run=run_config, steps=[1, 3], baseline_step=0))

Each evaluation is a cached task (a checkpoint never changes), so asking again costs nothing. The
markdown report (reward and pass^k per step) is published as an artifact and stored in reports/.
Where the environment has task categories (retail, airline, tau2), the report leads with pass^1 on tasks that
need a write, gives reward and pass^k per category, and shows the never-acts policy (no tool call, always
declines; played without a server) on the same scenarios as a second baseline (on tau2 its customer is still
an LLM: that model is called, once per turn). On retail and airline a third row is the expert that writes the
demonstrations, under the same limits: the ceiling (a write task it cannot finish within max_turns is out of
reach for the model too).
On tau2-retail / tau2-airline it also lists the leaderboard's figures, and `prompted_only=True` evaluates
a hosted model alone (see the README's tau2 section).
"""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from art_core.envs.tau2.published import reference_markdown
from art_core.evaluate import EvalReport, evaluation_settings
from art_core.fork import forked_evaluation
from art_core.reporting import eval_markdown
from art_pipeline.flows.config import EvaluateConfig
from art_pipeline.flows.lifetime import guard_temporary_server
from art_pipeline.flows.overrides import warn_if_config_replaced
from art_pipeline.flows.preflight import preflight
from art_pipeline.flows.reporting import artifact_key
from art_pipeline.flows.train import checkpoint_fingerprint_of, refs
from art_pipeline.tasks import (
    evaluate,
    evaluate_expert,
    evaluate_never_acts,
    evaluate_prompted,
    result_storage_for,
    with_result_storage,
)


@flow(name="evaluate", log_prints=True)
def evaluate_flow(config: EvaluateConfig) -> list[EvalReport]:
    """Evaluate `config.steps` (default: the latest) and the baseline; returns the reports, baseline first.
    The never-acts baseline and the expert are in the report and stored with the baselines, not returned."""
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    config = preflight(config)  # base model, environment, template: refused here, before any server starts
    run = config.run
    ref, rollout = refs(run, for_eval=True)  # evaluations sample at the evaluation temperature
    store = ref.store()
    steps = [] if config.prompted_only else list(config.steps) or [store.latest_step()]
    missing = [s for s in steps if s > 0 and not store.is_complete(s)]
    if missing:
        raise ValueError(
            f"steps {missing} have no complete checkpoint under {ref.path('checkpoints')}; "
            f"complete steps: {store.checkpoint_steps() or 'none'}"
        )
    results = result_storage_for(run.storage_url)
    task = with_result_storage(evaluate, results)
    e = run.eval

    settings = evaluation_settings(rollout, e.split, e.scenarios, e.trials, e.success_threshold)

    def one(step: int) -> EvalReport:
        copied = forked_evaluation(store, step, settings, e.split)
        if copied is not None:  # a forked step: its checkpoint and its evaluation are the source's
            print(f"step {step}: evaluated before the fork under the same settings; that evaluation is reused")
            return EvalReport.model_validate(copied)
        fingerprint = checkpoint_fingerprint_of(ref, step)
        return task(
            ref,
            rollout,
            step,
            fingerprint,
            e.split,
            e.scenarios,
            e.trials,
            e.success_threshold,
            run.inference_url,
            server=run.server.model_dump(exclude_unset=True) or None,
        )

    if config.baseline_model:  # a prompted model: same scenarios, same sampling, its own endpoint
        baseline = with_result_storage(evaluate_prompted, results)(
            run.storage_url,
            run.project,
            config.baseline_url or run.inference_url,
            config.baseline_model,
            rollout,
            e.split,
            e.scenarios,
            e.trials,
            e.success_threshold,
        )
    else:
        baseline = one(config.baseline_step) if config.baseline_step is not None else None
    reports = [one(s) for s in steps if config.baseline_model or s != config.baseline_step]
    rows, shown_baseline = (
        (reports, baseline) if reports else ([baseline] if baseline else [], None)
    )  # prompted_only: one row
    bounds = []  # where tasks have categories: the floor (a do-nothing agent passes refusals) and the ceiling
    if any(r.by_category for r in rows + ([shown_baseline] if shown_baseline else [])):
        for bound in (evaluate_never_acts, evaluate_expert):
            report = with_result_storage(bound, results)(
                run.storage_url, run.project, rollout, e.split, e.scenarios, e.trials, e.success_threshold
            )
            bounds += [report] if report is not None else []
    md = eval_markdown(rows, title=f"{run.model} on {e.split}", baseline=shown_baseline, more_baselines=bounds)
    # tau2-bench environments: the leaderboard's figures, and where this run departs from tau2's protocol
    reference = reference_markdown(
        run.environment.name,
        run.environment.options,
        rollout.sampling,  # what the evaluations sampled with (RunConfig.eval_sampling), not the train rollouts'
        split=e.split,
        scenarios=e.scenarios,
        trials=e.trials,
    )
    if reference:
        md = (
            md.replace(f"# {run.model} on {e.split}", f"# {run.model} on {run.environment.name} {e.split}", 1)
            + "\n"
            + reference
        )
        store.storage.write_text(ref.path("reports", f"eval-{run.environment.name}-{e.split}.md"), md)  # one per domain
    store.storage.write_text(ref.path("reports", "eval-compare.md"), md)
    create_markdown_artifact(
        key=artifact_key(run.project, run.model, "eval-compare"),
        markdown=md,
        description=f"{run.model}: steps {steps} vs {baseline.model if baseline else 'no baseline'}"
        + (f"; {rows[-1].headline.described()}" if rows else ""),
    )
    print(md)
    return ([baseline] if baseline else []) + reports
