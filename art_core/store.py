"""One model's folder in storage: its layout is spelt here (the few other places that name paths: docs/design.md).

    {project}/models/{name}/model.json                       what the model is (base model, ...)
    {project}/models/{name}/checkpoints/{step:04d}/          adapter + trainer state; COMPLETE written last
    {project}/models/{name}/trajectories/{split}/{step:04d}.jsonl        rollouts ({step:04d}.scored.jsonl: RULER's)
    {project}/models/{name}/history.jsonl                    one record per (step, phase) of metrics
    {project}/models/{name}/eval/{step:04d}.json             evaluation reports
    {project}/models/{name}/reports/                         reward curve, tables, markdown
    {project}/models/{name}/lease/{generation:08d}.json      the training run's lease (art_core.lease)
    {project}/baselines/{served name}/eval-{split}.json      a prompted baseline's evaluation

The library (`LocalBackend`, `Model.log`) and the Prefect tasks both go through a `ModelStore`; `Storage`
keeps the bytes (fsspec) and knows nothing of this layout. A rollout file that cannot be read back (truncated,
foreign, half copied) is reported as damaged, naming the file and the line (`DamagedRollouts`); a gather that
finds one warns so and rolls the step out again. Other files that cannot be read are treated as missing, with
a warning that names them: the work that wrote them is done again.

    >>> store = ModelStore("/tmp/art", "demo", "agent-001")
    >>> store.checkpoint(2)
    '/tmp/art/demo/models/agent-001/checkpoints/0002'
    >>> store.trajectories("train", 0)
    '/tmp/art/demo/models/agent-001/trajectories/train/0000.jsonl'
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import BaseModel, ConfigDict

from art_core.naming import validate_name
from art_core.storage import CHECKPOINT_MARKER, Storage
from art_core.trajectories import DamagedRollouts, read_jsonl, write_jsonl

if TYPE_CHECKING:
    from art_core.trajectories import TrajectoryGroup

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"  # written into each checkpoint by the trainer


class BaseModelMismatch(ValueError):
    """A model name already holds checkpoints trained from another base model."""


def model_dir(root: str, project: str, name: str) -> str:
    """`{root}/{project}/models/{name}` with both names checked (see naming.validate_name)."""
    return f"{root}/{validate_name(project, 'project')}/models/{validate_name(name, 'model name')}"


def step_dir(step: int) -> str:
    """The folder or file stem of one step: zero-padded so storage lists sort by step."""
    return f"{step:04d}"


def baseline_eval_path(storage: Storage, project: str, served_model: str, split: str) -> str:
    """Where a prompted baseline's report goes; `served_model` may hold '/' (openai/gpt-4.1)."""
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", served_model).strip("._") or "model"
    return storage.join(validate_name(project, "project"), "baselines", folder, f"eval-{split}.json")


class ModelStore:
    """Paths and records of one model (`project/name`) under a storage root (a folder or s3://)."""

    def __init__(self, storage: Storage | str, project: str, name: str) -> None:
        self.storage = storage if isinstance(storage, Storage) else Storage(storage)
        self.project, self.name = project, name
        self.root = model_dir(self.storage.root, project, name)
        self._warned: set[str] = set()

    @classmethod
    def in_default_root(cls, project: str, name: str) -> "ModelStore":
        """The model's store under the settings' storage root (ART_STORAGE_ROOT, else ./.art)."""
        from art_core.settings import get_settings

        return cls(get_settings().storage_root, project, name)

    def __repr__(self) -> str:
        return f"ModelStore({self.root!r})"

    def path(self, *parts: str) -> str:
        """A path under the model's folder."""
        return self.storage.join(self.root, *parts)

    def _warn_once(self, path: str, message: str) -> None:
        if path not in self._warned:
            self._warned.add(path)
            log.warning(message)

    # ---- model.json ------------------------------------------------------------------------------
    @property
    def model_json(self) -> str:
        return self.path("model.json")

    def read_model_json(self) -> dict[str, Any] | None:
        return self._read_json(self.model_json)

    @property
    def lease_dir(self) -> str:
        """The folder of the training run's lease on this model (art_core.lease): one writer per model."""
        return self.path("lease")

    def check_base_model(self, base_model: str) -> dict[str, Any]:
        """Raise BaseModelMismatch when the stored model.json names another base model; return what is stored.

        Reading only: what a read-only door (evaluation, LocalBackend(read_only=True)) checks instead of bind."""
        stored = self.read_model_json() or {}
        old = stored.get("base_model")
        if old and not same_base_model(old, base_model):
            raise BaseModelMismatch(
                f"{self.project}/{self.name} was trained from base model {old!r}, not {base_model!r}: its "
                f"checkpoints ({self.root}/checkpoints) do not fit. Use another model name, or the same base model."
            )
        return stored

    def bind(self, base_model: str, **record: Any) -> None:
        """Record which base model this name is trained from; refuse another one (both paths call this).

        Raises BaseModelMismatch naming both base models when the stored one differs. A run that trains
        holds the model's lease (art_core.lease) first: bind writes model.json.
        """
        stored = self.check_base_model(base_model)
        old = stored.get("base_model")
        merged = {
            **stored,
            **{k: v for k, v in record.items() if v is not None},
            "project": self.project,
            "name": self.name,
            "base_model": old or base_model,
        }
        if merged != stored:
            self.storage.write_json(self.model_json, merged)

    # ---- checkpoints -----------------------------------------------------------------------------
    def checkpoint(self, step: int) -> str:
        return self.path("checkpoints", step_dir(step))

    def is_complete(self, step: int) -> bool:
        """A checkpoint exists for everyone only once its COMPLETE marker is written (last)."""
        return self.storage.is_complete(self.checkpoint(step))

    def checkpoint_steps(self) -> list[int]:
        """Steps with a complete checkpoint, ascending; a folder without its marker is named in a warning."""
        base = self.path("checkpoints")
        if not self.storage.exists(base):
            return []
        steps = []
        for entry in self.storage.fs.ls(base, detail=False):
            tail = entry.rstrip("/").rsplit("/", 1)[-1]
            if not tail.isdigit():
                continue
            if self.is_complete(int(tail)):
                steps.append(int(tail))
            else:
                self._warn_once(
                    entry,
                    f"checkpoint folder {self.checkpoint(int(tail))} has no {CHECKPOINT_MARKER} "
                    "marker (a crash while it was written?): ignored; that step is trained again",
                )
        return sorted(steps)

    def latest_step(self) -> int:
        """The latest complete checkpoint's step; 0 (the base model) when there is none."""
        steps = self.checkpoint_steps()
        return steps[-1] if steps else 0

    def trainer_state(self, step: int) -> dict[str, Any] | None:
        """The trainer state saved in checkpoint `step` (its metrics included), None if absent or unreadable."""
        return self._read_json(self.storage.join(self.checkpoint(step), STATE_FILE))

    # ---- trajectories ----------------------------------------------------------------------------
    def trajectories(self, split: str, step: int) -> str:
        return self.path("trajectories", split, f"{step_dir(step)}.jsonl")

    def scored(self, split: str, step: int) -> str:
        """Where RULER's rescored groups of a step go, next to the gathered ones."""
        return self.path("trajectories", split, f"{step_dir(step)}.scored.jsonl")

    def write_groups(self, uri: str, groups: "Iterable[TrajectoryGroup]") -> int:
        """Write a whole file of groups; each records how many the file holds, so a cut at a line end shows."""
        groups = list(groups)
        for g in groups:
            g.metadata["groups_in_file"] = len(groups)
        buf = io.StringIO()
        n = write_jsonl(groups, buf)
        self.storage.write_text(uri, buf.getvalue())
        return n

    def read_groups(self, uri: str, *, damaged: str = "raise") -> "list[TrajectoryGroup] | None":
        """The groups in `uri`; None when the file is missing.

        A file that exists but does not read back (truncated JSON, a cut at a line end, a line that is not a
        group) raises DamagedRollouts naming the file and the line; `damaged="warn"` reads it as None with a
        warning saying so, for a caller that then does the work again (a gather rolls the step out again).
        """
        if damaged not in ("raise", "warn"):
            raise ValueError(f"damaged must be 'raise' or 'warn', not {damaged!r}")
        if not self.storage.exists(uri):
            return None
        try:
            return self._read_groups(uri)
        except DamagedRollouts as e:
            if damaged == "raise":
                raise
            log.warning("%s (read as absent: what wrote it is done again)", e)
            return None

    def _read_groups(self, uri: str) -> "list[TrajectoryGroup]":
        try:
            text = self.storage.read_text(uri)
        except UnicodeDecodeError:  # a stray byte: decoded again whole, to name its line
            raw = self.storage.fs.cat_file(uri)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line = raw.count(b"\n", 0, e.start) + 1
                raise DamagedRollouts(f"not UTF-8 text ({e.reason})", line=line, path=uri) from e
        groups = read_jsonl(io.StringIO(text), path=uri)
        expected = {g.metadata.get("groups_in_file", len(groups)) for g in groups}
        if expected and expected != {len(groups)}:
            lines = len(text.splitlines())
            raise DamagedRollouts(
                f"cut short: written with {max(expected)} groups, it holds {len(groups)}", line=lines + 1, path=uri
            )
        return groups

    # ---- history -----------------------------------------------------------------------------------
    @property
    def history(self) -> str:
        return self.path("history.jsonl")

    def read_history(self) -> list[dict[str, Any]]:
        """Every readable record of history.jsonl in the order written; a damaged line is skipped with a warning."""
        import json

        if not self.storage.exists(self.history):
            return []
        out = []
        for n, line in enumerate(self.storage.read_text(self.history).splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                self._warn_once(f"{self.history}:{n}", f"{self.history} line {n} cannot be read: skipped")
                continue
            if isinstance(rec, dict) and "step" in rec:
                out.append(rec)
        return out

    def record(self, step: int, metrics: dict[str, Any], prefix: str = "train/") -> dict[str, Any]:
        """Record `step`'s metrics of one phase; keys get `prefix` unless they already carry a '/'. Returns them.

        One record per (step, phase): a step trained or evaluated again (its checkpoint was lost) replaces
        its earlier record of that phase instead of counting twice.
        """
        import json

        prefixed = {(k if "/" in k else f"{prefix}{k}"): _plain(v) for k, v in metrics.items()}

        def same_phase(rec: dict[str, Any]) -> bool:
            keys = [k for k in rec if k not in ("step", "recorded_at")]
            return rec.get("step") == step and bool(keys) and all(k.startswith(prefix) for k in keys)

        # Rewritten whole from the readable records, so a damaged line left by a crash does not stay.
        lines = [json.dumps(r, sort_keys=True) for r in self.read_history() if not (prefix and same_phase(r))]
        lines.append(json.dumps({"step": step, "recorded_at": time.time(), **prefixed}, sort_keys=True))
        self.storage.write_text(self.history, "\n".join(lines) + "\n")
        return prefixed

    def step_metrics(self, step: int, prefix: str = "train/") -> dict[str, Any]:
        """The metrics recorded for `step` whose keys start with `prefix` (the latest record wins)."""
        out: dict[str, Any] = {}
        for rec in self.read_history():
            if rec.get("step") == step:
                out.update({k: v for k, v in rec.items() if k.startswith(prefix)})
        return out

    def train_metrics(self, step: int) -> dict[str, Any]:
        """The metrics recorded for training checkpoint `step`, without their "train/" prefix."""
        return {k.removeprefix("train/"): v for k, v in self.step_metrics(step, "train/").items()}

    def backfill_train_record(
        self, step: int, extra: dict[str, Any] | None = None, *, known_missing: bool = False
    ) -> dict[str, Any] | None:
        """Write checkpoint `step`'s train record from its trainer state if history has none (a crash between
        the checkpoint's marker and its record). Returns the record written, None when nothing was missing.
        `known_missing`: the caller has just seen the checkpoint complete and its record missing (not read again)."""
        if not known_missing and (self.step_metrics(step, "train/") or not self.is_complete(step)):
            return None
        state = self.trainer_state(step) or {}
        if state.get("kind") == "sft":  # written by supervised fine-tuning: its record lives under "sft/"
            return None
        metrics = {**(extra or {}), **(state.get("metrics") or {}), "backfilled": 1.0}
        log.warning(
            "history of %s had no train record for step %d (checkpoint %s exists): recorded it from the checkpoint",
            self.root,
            step,
            self.checkpoint(step),
        )
        return self.record(step, metrics, prefix="train/")

    # ---- evaluations and reports ---------------------------------------------------------------------
    def eval(self, step: int, split: str = "val") -> str:
        """Where step `step`'s evaluation on `split` is stored: `eval/{step}.json` for val (the split runs
        evaluate on), `eval/{split}/{step}.json` for any other, so an evaluation of the same step on test or
        train sits beside val's and never replaces it."""
        if split == "val":
            return self.path("eval", f"{step_dir(step)}.json")
        return self.path("eval", split, f"{step_dir(step)}.json")

    def read_evals(self, split: str = "val") -> list[dict[str, Any]]:
        """Every readable stored evaluation on `split`, by step; an unreadable one is named in a warning and
        skipped."""
        folder = self.path("eval") if split == "val" else self.path("eval", split)
        if not self.storage.exists(folder):
            return []
        paths = sorted(p for p in self.storage.fs.ls(folder, detail=False) if p.endswith(".json"))
        reports = [self._read_json(p) for p in paths]  # s3fs takes the bucket/key paths ls returns
        return [r for r in reports if isinstance(r, dict) and "step" in r and "reward" in r]

    def read_eval(self, step: int, split: str = "val") -> dict[str, Any] | None:
        """Step `step`'s stored evaluation on `split`; None when missing or unreadable (named in a warning)."""
        return self._read_json(self.eval(step, split))

    def write_eval(self, step: int, report: dict[str, Any], split: str = "val") -> None:
        self.storage.write_json(self.eval(step, split), report)

    def reports(self, *parts: str) -> str:
        return self.path("reports", *parts)

    # ---- helpers -------------------------------------------------------------------------------------
    def _read_json(self, path: str) -> Any:
        import json

        if not self.storage.exists(path):
            return None
        try:
            return json.loads(self.storage.read_text(path))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self._warn_once(path, f"{path} cannot be read ({e}): treated as missing")
            return None


def file_fingerprint(storage: Storage, path: str) -> str:
    """What identifies a stored file's content: its ETag (S3) or size and mtime (local). A cache keyed on it
    misses when the file is written again."""
    info = storage.fs.info(path)
    return str(info.get("ETag") or f"{info.get('size')}-{info.get('mtime') or info.get('LastModified')}")


def same_base_model(a: str, b: str) -> bool:
    """Two spellings of one base model: equal strings, or paths to the same folder."""
    return a == b or (os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b))


def _plain(v: Any) -> Any:
    """JSON-friendly scalars (numpy/torch scalars become floats)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


class ModelRef(BaseModel):
    """A model in storage as a small, storable value (task parameters, cache keys): root, project, name, base.

    >>> ref = ModelRef(storage_url="s3://bucket/runs", project="demo", model="agent-001", base_model="/models/tiny")
    >>> ref.store().checkpoint(2)
    's3://bucket/runs/demo/models/agent-001/checkpoints/0002'
    """

    model_config = ConfigDict(frozen=True)

    storage_url: str
    project: str
    model: str
    base_model: str

    def store(self) -> ModelStore:
        return ModelStore(self.storage_url, self.project, self.model)

    def storage(self) -> Storage:
        return Storage(self.storage_url)

    def path(self, *parts: str) -> str:
        """A path under the model's folder, e.g. ref.path("reports")."""
        return self.store().path(*parts)
