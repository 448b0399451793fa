"""Fork a model: a new model name that starts as another model stood at one of its checkpoints.

ART's `backend._experimental_fork_checkpoint` (and the pipeline's `RunConfig.fork_from`) copy the source's
folder up to step N into the new name: its checkpoints up to N, the rollouts that trained them, its
evaluations up to N, its history records up to N, its SFT stage markers and model.json. The new model then
resumes exactly as the source would have at step N, in either door: a run with the same SFT settings finds
those epochs done, and GRPO continues at step N + 1 under whatever new settings the run gives (another
train reward, learning rate, judge). The source is only read. Its lease, reports and the rollouts of steps
N and later are not copied: the fork writes its own.

Forking again into the same name is a no-op when model.json records the same fork (a script that forks
before it registers can be run again, and resumes, even after the source trained on); a name that has
trained already (checkpoints or history of its own), or is registered with another base model, is refused,
so nothing it holds is overwritten. A door that knows the base model its run will bind (`base_model`) is
refused before the copy when the source was trained from another one: the copy would hold adapters that do
not fit, and binding would refuse it only afterwards.

    >>> src, dst = ModelStore("./.art", "cs", "retail-001"), ModelStore("./.art", "cs", "retail-001-b")  # doctest: +SKIP
    >>> fork_model(src, dst, not_after_step=2)                                                            # doctest: +SKIP
    2
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from art_core.storage import copy_tree
from art_core.store import ModelStore, same_base_model

log = logging.getLogger(__name__)

_STEP = re.compile(r"^(\d{4,})(\..*)?$")  # a step's folder or file: 0002, 0002.json, 0002.scored.jsonl


class ForkError(ValueError):
    """A fork that cannot be made as asked (no such checkpoint, a target that holds other work)."""


def fork_source_step(source: ModelStore, not_after_step: int | None = None) -> int:
    """The step a fork of `source` starts from: its latest complete checkpoint at or before `not_after_step`
    (the latest of all when None). Raises ForkError naming the steps there are."""
    steps = source.checkpoint_steps()
    fit = [s for s in steps if not_after_step is None or s <= not_after_step]
    if not fit:
        where = f"{source.project}/{source.name} in {source.storage.root}"
        if not steps:
            raise ForkError(f"cannot fork {where}: it has no complete checkpoint (train it first, or check the name)")
        raise ForkError(
            f"cannot fork {where} at or before step {not_after_step}: its checkpoints are steps "
            f"{', '.join(map(str, steps))}"
        )
    return fit[-1]


def _wanted(rel: str, step: int) -> bool:
    """Whether a file of the source's folder (path relative to it) belongs to the model as it stood at `step`."""
    parts = rel.split("/")
    if parts[0] in ("lease", "reports", "history.jsonl", "model.json"):
        return False  # a run's own; the history is filtered record by record, model.json written with the fork
    if parts[0] in ("checkpoints", "eval", "trajectories"):
        m = _STEP.match(parts[-1] if parts[0] != "checkpoints" else parts[1] if len(parts) > 1 else "")
        if m:
            n = int(m.group(1))
            if parts[0] == "trajectories" and len(parts) > 2 and parts[1] == "train":
                return n < step  # train rollouts of step n trained checkpoint n + 1
            return n <= step  # checkpoints, evaluations and their rollouts
    return True  # SFT stage markers and anything else without a step


def forked_before(source: ModelStore, target: ModelStore, not_after_step: int | None = None) -> int | None:
    """The step `target` was forked from `source` at, when model.json records that fork and it is the one asked
    for (`not_after_step` None: any step, as the source may have trained on since); else None."""
    record = (target.read_model_json() or {}).get("forked_from") or {}
    same = (record.get("project"), record.get("model"), record.get("storage")) == (
        source.project,
        source.name,
        source.storage.root,
    )
    if not same or not isinstance(record.get("step"), int):
        return None
    if not_after_step is not None and record["step"] != fork_source_step(source, not_after_step):
        return None
    return record["step"]


def plan_fork(
    source: ModelStore, target: ModelStore, not_after_step: int | None = None, base_model: str | None = None
) -> tuple[int, bool]:
    """(the step a fork of `source` into `target` starts from, whether `target` holds that fork already), with
    nothing copied; raises ForkError for a fork that cannot be made (see module doc). What both doors check
    before any work, and what `fork_model` checks before it copies.

    `base_model`: the base model the door will bind the target to after the fork, spelled as that door binds
    it (the pipeline's resolved folder, the library's `model.base_model`); compared the way binding compares."""
    source_base = (source.read_model_json() or {}).get("base_model")
    registered = (target.read_model_json() or {}).get("base_model")
    for other, whose in ((base_model, "the run's base model"), (registered, "its registered base model")):
        if other and source_base and not same_base_model(source_base, other):
            raise ForkError(
                f"cannot fork {source.project}/{source.name} (trained from base model {source_base!r}) into "
                f"{target.project}/{target.name}: {whose} is {other!r}, and an adapter fits only its own base "
                "model. Use the source's base model, or fork another source; nothing was changed."
            )
    done = forked_before(source, target, not_after_step)
    if done is not None:
        return done, True
    step = fork_source_step(source, not_after_step)
    have = target.checkpoint_steps()
    if have or target.read_history():
        raise ForkError(
            f"{target.project}/{target.name} has trained already"
            + (f" (checkpoints {', '.join(map(str, have))})" if have else "")
            + f" and was not forked from {source.project}/{source.name} step {step}: fork into a new model name; "
            "nothing was changed."
        )
    return step, False


def fork_model(
    source: ModelStore, target: ModelStore, not_after_step: int | None = None, base_model: str | None = None
) -> int:
    """Copy `source` as it stood at its latest checkpoint not after `not_after_step` into `target`; the step.

    Idempotent for the same fork; raises ForkError when the source has no such checkpoint, the target
    already holds checkpoints of its own, or the source was trained from another `base_model` than the
    run's (see `plan_fork`), with nothing copied."""
    step, done = plan_fork(source, target, not_after_step, base_model)
    if done:
        log.info(
            "%s/%s is already forked from %s/%s step %d", target.project, target.name, source.project, source.name, step
        )
        return step
    copied = copy_tree(source.storage, source.root, target.storage, target.root, keep=lambda rel: _wanted(rel, step))
    kept = [r for r in source.read_history() if _record_step(r) <= step]
    if kept:
        target.storage.write_text(target.history, "".join(json.dumps(r) + "\n" for r in kept))
    meta = {
        **(target.read_model_json() or {}),
        **(source.read_model_json() or {}),
        "project": target.project,
        "name": target.name,
        "forked_from": {"project": source.project, "model": source.name, "step": step, "storage": source.storage.root},
    }
    target.storage.write_json(target.model_json, meta)  # last: it marks the fork done
    log.warning(
        "forked %s/%s at step %d into %s/%s (%d files)",
        source.project,
        source.name,
        step,
        target.project,
        target.name,
        len(copied),
    )
    return step


def forked_evaluation(store: ModelStore, step: int, settings: str, split: str = "val") -> dict[str, Any] | None:
    """The stored evaluation of `step` on `split` when the fork copied it with the checkpoint (step at or before the fork's)
    and it ran under `settings` (art_core.evaluate.evaluation_settings); else None.

    A forked step's checkpoint is the source's byte for byte, so its copied evaluation stands: evaluating it
    again would cost an evaluation's time and, at a temperature above 0, give a second sample of the same
    weights, so GRPO's change over the fork point would be measured against another SFT figure than the
    source's."""
    origin = (store.read_model_json() or {}).get("forked_from") or {}
    if not isinstance(origin.get("step"), int) or not 0 <= step <= origin["step"]:
        return None
    stored = store.read_eval(step, split)
    return stored if stored and settings and stored.get("settings") == settings else None


def _record_step(record: dict[str, Any]) -> int:
    step = record.get("step")
    return int(step) if isinstance(step, (int, float)) else 0
