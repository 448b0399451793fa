"""The retrain flow (scheduled nightly): continue from the latest checkpoint, evaluate, promote only if better.

    retrain(RetrainConfig(run=run_config, extra_steps=2))

1. train `extra_steps` more steps (the train flow as a subflow; later steps draw scenarios not seen yet),
2. evaluate the new latest step and the promoted one (cached if already measured),
3. promote the new step and export it only if its reward beats the promoted one, and deploy it to
   `config.deploy.deploy_to` when set (Together, W&B, merged weights, vLLM); otherwise keep the old step
   and say so (nothing is deployed).
"""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel

from art_core.deploy import decide, promote, read_promoted
from art_pipeline.flows.config import RetrainConfig
from art_pipeline.flows.deploy import deploy_to_target
from art_pipeline.flows.lifetime import guard_temporary_server
from art_pipeline.flows.overrides import warn_if_config_replaced
from art_pipeline.flows.preflight import preflight
from art_pipeline.flows.reporting import artifact_key
from art_pipeline.flows.train import checkpoint_fingerprint_of, refs, train
from art_pipeline.tasks import evaluate, export_adapter, result_storage_for, with_result_storage


class RetrainSummary(BaseModel):
    promoted_step: int
    previous_step: int | None
    new_step: int
    new_reward: float
    promoted_reward: float | None
    promoted: bool
    message: str
    deployment: dict | None = None  # target, step, endpoint, model_name, status of the promoted step's deployment


@flow(name="retrain", log_prints=True)
def retrain(config: RetrainConfig) -> RetrainSummary:
    """Train `extra_steps` beyond the latest checkpoint and promote the result only if it is better."""
    warn_if_config_replaced()  # a run given a whole new config, not a few fields: say what fell back
    guard_temporary_server()  # a temporary Prefect server dies with this process, SIGKILL included
    config = preflight(config)  # base model, environment, template: refused here, before any work
    run = config.run
    ref, rollout = refs(run, for_eval=True)  # evaluations sample at the evaluation temperature
    storage = ref.storage()
    latest = ref.store().latest_step()
    train(run.model_copy(update={"steps": latest + config.extra_steps}))
    new_step = ref.store().latest_step()

    task = with_result_storage(evaluate, result_storage_for(run.storage_url))
    e = run.eval

    def reward_of(step: int) -> float:
        fingerprint = checkpoint_fingerprint_of(ref, step)
        return task(
            ref, rollout, step, fingerprint, e.split, e.scenarios, e.trials, e.success_threshold, run.inference_url
        ).reward

    old = read_promoted(storage, run.project, run.model)
    deployment, deploy_error = None, None
    # Before any promotion the step we started from is the one to beat (step 0 is the base model).
    old_step = old["step"] if old else latest
    old_reward = reward_of(old_step)
    new_reward = reward_of(new_step)
    if decide(new_reward, old_reward, config.min_improvement):
        promote(storage, run.project, run.model, new_step, new_reward, e.split)
        message = f"promoted step {new_step}: reward {new_reward:.3f} beats step {old_step}'s {old_reward:.3f}"
        if config.deploy.deploy_to:
            try:
                d = deploy_to_target(ref, new_step, config.deploy)
            except Exception as e:  # the promotion stands; the artifact says what failed, then the run fails
                deploy_error = e
                message += f"; deploying it to {config.deploy.deploy_to} failed: {e}"
            else:
                deployment = d.model_dump(include={"target", "step", "endpoint", "model_name", "status", "uri"})
                message += f"; deployed to {d.target}: {d.endpoint or d.uri} as {d.model_name!r} ({d.status})"
        else:
            export_adapter(ref, new_step)
    else:
        if old is None and old_step > 0:
            promote(storage, run.project, run.model, old_step, old_reward, e.split)
        message = (
            f"kept step {old_step} (reward {old_reward:.3f}): new step {new_step} scored {new_reward:.3f}, "
            f"not better by more than {config.min_improvement}"
        )
    print(message)
    promoted_now = read_promoted(storage, run.project, run.model)
    decision = "promoted" if promoted_now is not None and promoted_now["step"] == new_step else "kept"
    # The decision is what a scheduled run is for: an artifact shows it in the UI without opening the logs.
    create_markdown_artifact(
        key=artifact_key(run.project, run.model, "retrain"),
        markdown=(
            f"# Retrain of {run.model}: {decision} step {new_step if decision == 'promoted' else old_step}\n\n{message}.\n\n"
            f"| step | role | {e.split} reward |\n|---|---|---|\n| {old_step} | promoted before | {old_reward:.3f} |\n"
            f"| {new_step} | new | {new_reward:.3f} |\n\nminimum improvement: {config.min_improvement}\n"
            + (
                f"\ndeployed: target {deployment['target']}, step {deployment['step']}, endpoint "
                f"{deployment['endpoint'] or deployment['uri']}, model `{deployment['model_name']}`\n"
                if deployment
                else ""
            )
        ),
        description=f"{run.model}: {decision}",
    )
    if deploy_error is not None:
        raise deploy_error
    return RetrainSummary(
        promoted_step=promoted_now["step"] if promoted_now else old_step,
        previous_step=old_step,
        new_step=new_step,
        new_reward=new_reward,
        promoted_reward=old_reward,
        promoted=promoted_now is not None and promoted_now["step"] == new_step,
        message=message,
        deployment=deployment,
    )
