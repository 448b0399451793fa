"""What a train run decides about each step from what storage holds: resume, SFT's epochs, repair, prefetch.

The train flow (flows/train.py) runs gather -> score -> train -> evaluate for steps 0..last-1; step s samples
checkpoint s (0: the base model) and trains checkpoint s + 1. Storage is the run's only memory, so a run
started again after a crash asks it, step by step:

    run = RunState(ModelStore(root, "demo", "agent"), last=5, off_policy=1, eval_every=2)
    plan = run.plan(0)       # StepPlan(step=0, trained=True, sft=True): checkpoint 1 is an SFT epoch
    run.sample_step(3)       # 2 when checkpoint 3 is not complete yet (one step off policy)
    run.prefetch(2, {3})     # [] : step 3's rollouts are gathered already, 4 is past the run's end

Nothing here starts a task or a server; the flow acts on the answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Container

from art_core.store import ModelStore


def run_length(steps: int, sft_start: int, sft_epochs: int) -> int:
    """The checkpoints a run with an SFT stage ends with, SFT's epochs included: `steps`, or more when SFT
    started past 0, as GRPO continues after SFT's last epoch (from checkpoint 3, 2 epochs hold 5 already).

    >>> run_length(5, sft_start=0, sft_epochs=2), run_length(4, sft_start=3, sft_epochs=2)
    (5, 5)
    """
    return max(steps, sft_start + sft_epochs)


@dataclass(frozen=True)
class StepPlan:
    """What storage says about step `step` before it runs."""

    step: int
    trained: bool  # checkpoint step + 1 is complete (a resumed run): its rollouts are not read or repaired
    sft: bool  # ... and step `step` has no rollouts: trained without any (SFT), nothing to gather, score or train


@dataclass
class RunState:
    """A run's shape (`last` checkpoints, `off_policy` = max_steps_off_policy, `eval_every`) over its store."""

    store: ModelStore
    last: int
    off_policy: int = 0
    eval_every: int = 0

    def plan(self, step: int) -> StepPlan:
        """Whether step `step` is trained already, and whether on no rollouts (SFT's epochs)."""
        trained = self.store.is_complete(step + 1)
        return StepPlan(step=step, trained=trained, sft=self.trained_without_rollouts(step, trained))

    def trained_without_rollouts(self, step: int, trained: bool | None = None) -> bool:
        """Checkpoint `step + 1` exists and no rollouts of step `step` do: it was not trained here on rollouts
        (SFT's epochs). `trained`: whether checkpoint `step + 1` is complete, when the caller knows already."""
        trained = self.store.is_complete(step + 1) if trained is None else trained
        return trained and not self.store.storage.exists(self.store.trajectories("train", step))

    def sample_step(self, step: int) -> int:
        """The checkpoint step `step` samples from: `step` itself when synchronous; off policy, the newest
        complete checkpoint not after it (at most `off_policy` steps older, as the flow waits for that)."""
        if not self.off_policy:
            return step
        return max(s for s in [0, *self.store.checkpoint_steps()] if s <= step)

    def oldest_reusable(self, step: int) -> int:
        """Off policy: stored rollouts of step `step` sampled from this checkpoint or a newer one are reused."""
        return max(0, step - self.off_policy)

    def prefetch(self, step: int, started: Container[int]) -> list[int]:
        """While step `step` trains, the later steps whose rollouts to start gathering: the next `off_policy`
        ones within the run, not `started` already, and not trained without rollouts (SFT's epochs)."""
        later = range(step + 1, min(self.last, step + 1 + self.off_policy))
        return [s for s in later if s not in started and not self.trained_without_rollouts(s)]

    def lost(self, plan: StepPlan, uri: str) -> bool:
        """A cached gather or score whose file is gone or damaged (a warning names it): it is run again,
        unless the step is trained already (then its rollouts are not needed)."""
        return not plan.trained and self.store.read_groups(uri, damaged="warn") is None

    def eval_due(self, checkpoint: int) -> bool:
        """Every `eval_every` checkpoints, and the last one; never when `eval_every` is 0."""
        return bool(self.eval_every) and (checkpoint % self.eval_every == 0 or checkpoint == self.last)

    def keep_eval(self, checkpoint: int, report: dict[str, Any]) -> bool:
        """Write a cached evaluation's report back when its file was lost or damaged; True when written."""
        split = report.get("split") or "val"
        if self.store.read_eval(checkpoint, split) is not None:
            return False
        self.store.write_eval(checkpoint, report, split)
        return True
