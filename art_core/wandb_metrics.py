"""`model.log`'s W&B side, as in ART: each record also goes to the model's W&B run when one is configured.

Configured means: the model's `report_metrics` names "wandb", or it is left unset (None, ART's default) and
WANDB_API_KEY is set. `WANDB_MODE=disabled` turns it off; `WANDB_MODE=offline` logs to local files (no key
needed when asked for with report_metrics). As in ART, a model's run has the model's name as its id and is
resumed, so every process that logs the same model (the train flow, an eval, a notebook) adds to one run, and
metrics are plotted against `training_step`. wandb is imported only when a record is sent.

    model = art.TrainableModel(name="agent-001", project="retail", base_model=..., report_metrics=["wandb"])
    await model.log(groups, metrics=result.metrics, step=result.step, split="train")  # history.jsonl + W&B
    art_core.wandb_metrics.finish_runs()       # optional: finish the runs now (wandb also does so at exit)
"""

from __future__ import annotations

import os
import threading
from typing import Any

_REPORTERS = {"wandb"}
_runs: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()  # model.log runs in worker threads; one wandb.init per model


def wandb_wanted(report_metrics: list[str] | None) -> bool:
    """Whether a model with this `report_metrics` logs to W&B now (see the module docstring); raises
    ValueError when it names "wandb" but neither WANDB_API_KEY nor WANDB_MODE=offline is set.

        >>> wandb_wanted([])
        False
    """
    if os.environ.get("WANDB_MODE", "").lower() == "disabled":
        return False
    if report_metrics is None:
        return bool(os.environ.get("WANDB_API_KEY"))
    unknown = sorted(set(report_metrics) - _REPORTERS)
    if unknown:
        from art_core.dev import warn_unsupported  # once per process: log runs every step

        warn_unsupported("report_metrics", unknown, "not reported here; only 'wandb' is")
    if "wandb" not in report_metrics:
        return False
    _mode()  # asked for by name: a missing key is an error now, before the record is written anywhere
    return True


def _mode() -> str:
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun"):
        return "offline"
    if not os.environ.get("WANDB_API_KEY"):
        raise ValueError(
            "report_metrics asks for W&B but WANDB_API_KEY is not set: export it, or set "
            "WANDB_MODE=offline to log to local files (wandb sync uploads them later)"
        )
    return "online"


def log_record(project: str, run_id: str, step: int, metrics: dict[str, Any], run_name: str | None = None) -> str:
    """Log one record's numeric metrics to the model's W&B run at `training_step=step`; returns the run's dir.

    project: the W&B project (the model's project); run_id: the model's (path-safe) name, the run's id.
    """
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    values = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    with _lock:
        run = _runs.get((project, run_id))
        if run is None or getattr(run, "_is_finished", False):
            run = wandb.init(
                project=project,
                id=run_id,
                name=run_name or run_id,
                resume="allow",
                mode=_mode(),
                dir=os.environ.get("WANDB_DIR") or None,
                reinit="create_new",
            )
            run.define_metric("training_step")
            run.define_metric("*", step_metric="training_step")  # ART's x-axis: records may arrive out of order
            _runs[(project, run_id)] = run
        run.log({**values, "training_step": step})
        return run.dir


def finish_runs() -> None:
    """Finish every model run this process opened (wandb's service completes their files shortly after)."""
    with _lock:
        runs = list(_runs.values())
        _runs.clear()
    for run in runs:
        run.finish()


__all__ = ["finish_runs", "log_record", "wandb_wanted"]
