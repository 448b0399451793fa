"""Supervised fine-tuning with ART's names: chat-format JSONL in, the model's next checkpoint out.

    await model.train_sft(trajectories, config=TrainSFTConfig(learning_rate=5e-5))   # ART's entry point
    await backend.train_sft(model, trajectories, config)                             # the same, backend-first
    await train_sft_from_file(model, "data/train.jsonl", epochs=3, peak_lr=2e-4)     # art.utils.sft's helper

Each line of the file is {"messages": [...], "tools": [...]?} in OpenAI's chat format, the last message
the assistant's. SFT trains the LoRA adapter GRPO trains and writes the model's next checkpoint, so a
GRPO run (backend.train, or the train flow) continues from it with its step numbering. The Prefect
`sft` flow (flows/sft.py) runs the same steps as cached, resumable tasks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

from art_core.training.sft import TrainSFTConfig
from art_core.trajectories import Trajectory

if TYPE_CHECKING:
    from art_core.training.result import TrainResult
    from art_core.model import TrainableModel
    from art_core.store import ModelStore
    from art_core.training.config import TrainConfig

log = logging.getLogger(__name__)

__all__ = [
    "SFTChunk",
    "SFTSpec",
    "TrainSFTConfig",
    "check_fork_keeps_sft",
    "create_sft_dataset_iterator",
    "learning_rates",
    "parse_sft_lines",
    "read_sft_file",
    "recorded_stages",
    "sft_and_record",
    "sft_epoch",
    "sft_key",
    "sft_plan",
    "store_expert_demonstrations",
    "train_sft_from_file",
]


def parse_sft_lines(text: str, source: str = "SFT data") -> list[Trajectory]:
    """Trajectories from chat-format JSONL text; a bad line raises naming its number and what to fix.

    >>> [t.messages()[-1]["content"] for t in parse_sft_lines('{"messages": [{"role": "user", "content": "hi"}, '
    ...                                                        '{"role": "assistant", "content": "yo"}]}')]
    ['yo']
    """
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source} line {n}: not JSON ({e.msg})") from None
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{source} line {n}: needs a non-empty 'messages' list of chat messages")
        roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
        if bad := [r for r in roles if r not in ("system", "user", "assistant", "tool")]:
            raise ValueError(f"{source} line {n}: role {bad[0]!r} is not system, user, assistant or tool")
        if roles[-1] != "assistant":
            raise ValueError(f"{source} line {n}: the last message must be the assistant's (it is {roles[-1]!r})")
        tools = row.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise ValueError(f"{source} line {n}: 'tools' must be a list of OpenAI tool definitions")
        out.append(Trajectory(messages_and_choices=messages, tools=tools))
    if not out:
        raise ValueError(f"{source} holds no examples")
    return out


def read_sft_file(path: str) -> list[Trajectory]:
    """The examples of a chat-format JSONL file, local or in object storage (s3://...)."""
    return parse_sft_lines(_read_text(path), path)


def learning_rates(
    n_batches: int, peak_lr: float, schedule_type: str = "cosine", warmup_ratio: float = 0.0
) -> list[float]:
    """One learning rate per batch: linear warmup to `peak_lr`, then cosine, linear or constant decay.

    The warmup's last batch reaches the peak and the decay then starts from the peak, so the peak is held for
    one more batch (the first one after the warmup).

    >>> [round(x, 3) for x in learning_rates(4, 1.0, "linear", warmup_ratio=0.25)]
    [1.0, 1.0, 0.5, 0.0]
    """
    if schedule_type not in ("cosine", "linear", "constant"):
        raise ValueError(f"schedule_type {schedule_type!r}: use 'cosine', 'linear' or 'constant'")
    warm = int(round(n_batches * warmup_ratio))
    rates = []
    for i in range(n_batches):
        if i < warm:
            rates.append(peak_lr * (i + 1) / warm)
            continue
        left = max(n_batches - warm - 1, 1)
        frac = (i - warm) / left
        decay = {"cosine": 0.5 * (1 + math.cos(math.pi * frac)), "linear": 1 - frac, "constant": 1.0}[schedule_type]
        rates.append(peak_lr * decay)
    return rates


@dataclass
class SFTChunk:
    """Consecutive batches trained as one `train_sft` call (one checkpoint), with their slice of the schedule."""

    trajectories: list[Trajectory]
    config: TrainSFTConfig
    epoch: int


def create_sft_dataset_iterator(
    trajectories: list[Trajectory],
    *,
    epochs: int = 1,
    batch_size: int = 2,
    peak_lr: float = 2e-4,
    schedule_type: str = "cosine",
    warmup_ratio: float = 0.0,
    assistant_turns: str = "all",
    seed: int = 0,
    chunk_size: int | None = None,
) -> Iterator[SFTChunk]:
    """ART's iterator: the whole run's schedule computed once, then handed out a chunk (default: an epoch) at a
    time, each chunk one `train_sft` call. Examples are shuffled per epoch with a fixed seed.

    >>> [len(c.trajectories) for c in create_sft_dataset_iterator([Trajectory()] * 5, epochs=2, batch_size=2)]
    [5, 5]
    """
    import random

    if epochs < 1 or batch_size < 1:
        raise ValueError("epochs and batch_size must be >= 1")
    per_epoch = math.ceil(len(trajectories) / batch_size)
    rates = learning_rates(per_epoch * epochs, peak_lr, schedule_type, warmup_ratio)
    chunk = chunk_size or len(trajectories)
    for epoch in range(epochs):
        order = list(trajectories)
        random.Random(seed * 1000 + epoch).shuffle(order)
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            first = epoch * per_epoch + start // batch_size
            lr = rates[first : first + math.ceil(len(part) / batch_size)]
            cfg = TrainSFTConfig(learning_rate=lr, batch_size=batch_size, assistant_turns=assistant_turns)
            yield SFTChunk(part, cfg, epoch)


def sft_and_record(
    store: "ModelStore",
    base_model: str,
    trajectories: list[Trajectory],
    config: TrainSFTConfig,
    train_config: "TrainConfig",
    step: int,
    *,
    servers: Iterable[Any] = (),
) -> "TrainResult":
    """Train checkpoint `step` -> `step + 1` by SFT and record it in history.jsonl under "sft/"; once (a complete
    checkpoint `step + 1` is not trained again: `trained=False`). `servers` sleep while it trains (those on GPUs of
    their own keep serving), as in art_core.step.train_and_record: both go through art_core.step.run_and_record."""
    from art_core.serving import sleeps_for_training
    from art_core.step import already_trained, run_and_record
    from art_core.training.sft import sft_step

    done = already_trained(store, None, step + 1, prefix="sft/")
    if done is not None:
        return done
    return run_and_record(
        store,
        sft_step,
        prefix="sft/",
        servers=[s for s in servers if sleeps_for_training(s, train_config)],
        base_model=base_model,
        trajectories=trajectories,
        config=config,
        train_config=train_config,
        step=step,
    )


async def train_sft_from_file(
    model: "TrainableModel",
    file_path: str,
    epochs: int = 1,
    batch_size: int = 2,
    peak_lr: float = 2e-4,
    schedule_type: str = "cosine",
    warmup_ratio: float = 0.0,
    assistant_turns: str = "all",
    verbose: bool = False,
    **_: Any,
) -> "TrainResult | None":
    """ART's `art.utils.sft.train_sft_from_file`: one `model.train_sft` call (one checkpoint) per epoch."""
    result = None
    for chunk in create_sft_dataset_iterator(
        read_sft_file(file_path),
        epochs=epochs,
        batch_size=batch_size,
        peak_lr=peak_lr,
        schedule_type=schedule_type,
        warmup_ratio=warmup_ratio,
        assistant_turns=assistant_turns,
    ):
        result = await model.backend.train_sft(model, chunk.trajectories, chunk.config, verbose=verbose)
    return result


class SFTSpec(BaseModel):
    """How a JSONL file is trained (the arguments of `train_sft_from_file`), one checkpoint per epoch."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(1, ge=1, description="Passes over the file; each writes one checkpoint (step + 1).")
    batch_size: int = Field(2, ge=1, description="Conversations per optimizer step.")
    peak_lr: float = Field(2e-4, gt=0, description="Peak learning rate of the schedule (tiny models want ~1e-2).")
    schedule_type: Literal["cosine", "linear", "constant"] = Field("cosine", description="Decay after warmup.")
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description="Share of the batches spent warming up linearly.")
    assistant_turns: Literal["all", "last"] = Field("all", description="Train every assistant turn, or the last.")
    seed: int = Field(0, description="Seed of the per-epoch shuffle.")

    def chunks(self, trajectories: list[Trajectory]) -> list[SFTChunk]:
        """The run's chunks, one per epoch, with their slice of the learning-rate schedule."""
        return list(create_sft_dataset_iterator(trajectories, **self.model_dump()))  # its fields are the arguments


def sft_plan(store: "ModelStore", data: str, spec: SFTSpec) -> tuple[str, int]:
    """(run key, first step) of an SFT run of `data` with `spec` on this model, stable across reruns.

    The first run starts at the model's latest checkpoint (0 if none) and writes that down under
    `sft/{key}.json`; a rerun (after a crash, or again) reads it back, so its epochs map to the same
    checkpoints and finished ones are not trained again.
    """
    key = sft_key(data, spec)
    marker = store.path("sft", f"{key}.json")
    if store.storage.exists(marker):
        return key, int(store.storage.read_json(marker)["start_step"])
    start = store.latest_step()
    for other in _unfinished_stages(store, data, start):
        # The same file under other settings (a changed --sft-epochs, say) is a new stage on top of the latest
        # checkpoint, not the rest of the old one: say so, since a user who meant to continue loses nothing yet.
        log.warning(
            "SFT of %s: these settings differ from the stage that began at checkpoint %d (%s), %d of whose %d "
            "epochs are done; a new stage starts at checkpoint %d with its own schedule, and the old stage's "
            "remaining epochs are not trained. To finish the old stage instead, run again with its settings.",
            data,
            other["start_step"],
            ", ".join(
                f"{k} {other['spec'].get(k)!r} -> {v!r}"
                for k, v in spec.model_dump().items()
                if other["spec"].get(k) != v
            ),
            start - other["start_step"],
            other["spec"]["epochs"],
            start,
        )
    store.storage.write_json(marker, {"start_step": start, "data": data, "spec": spec.model_dump()})
    return key, start


def sft_key(data: str, spec: SFTSpec) -> str:
    """The key of an SFT stage (`sft/{key}.json`): the data file's contents and the spec, not the file's path."""
    import hashlib

    text = json.dumps([_read_text(data), spec.model_dump()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def recorded_stages(store: "ModelStore") -> list[dict[str, Any]]:
    """The SFT stages this model's folder records ({"start_step", "data", "spec", "key"}), in key order."""
    folder = store.path("sft")
    if not store.storage.exists(folder):
        return []
    names = sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in store.storage.fs.ls(folder, detail=False))
    return [
        {**store.storage.read_json(store.path("sft", name)), "key": name[: -len(".json")]}
        for name in names
        if name.endswith(".json")
    ]


def check_fork_keeps_sft(store: "ModelStore", data: str, spec: SFTSpec, source: str) -> None:
    """Refuse (ValueError) an SFT stage that would begin on a forked model whose source was fine-tuned already, on
    other demonstrations or settings: a fork at the last SFT epoch is meant to find its SFT done, and would
    otherwise train `spec.epochs` more epochs on top of it before any GRPO step. Passes when this stage is one
    the source recorded (done, or to resume), or when the source had no SFT (fine-tuning a forked model then is
    what the run asks for)."""
    if store.storage.exists(store.path("sft", f"{sft_key(data, spec)}.json")):
        return
    stages = recorded_stages(store)
    if not stages:
        return
    latest = store.latest_step()
    theirs = max(stages, key=lambda stage: stage["start_step"])  # the SFT the forked checkpoint ends with
    changed = [k for k, v in spec.model_dump().items() if theirs["spec"].get(k) != v]
    if theirs.get("data") != data:
        why = f"other demonstrations ({theirs['data']})"
    elif _stage_key(data, theirs["spec"]) != theirs["key"]:
        why = f"{data} before its contents changed"
    else:
        why = data
    if changed:
        why += ", with " + ", ".join(f"{k} {theirs['spec'].get(k)!r} -> {getattr(spec, k)!r}" for k in changed)
    raise ValueError(
        f"{source} was fine-tuned on {why}; this run's SFT stage ({data}) is not one it ran, so it would train "
        f"{spec.epochs} more SFT epochs (checkpoints {latest + 1}-{latest + spec.epochs}) on top of that SFT "
        "before any GRPO step. To try a GRPO variant on the source's SFT, give the SFT settings and "
        f"demonstrations it trained on (sft.demonstrations {theirs['data']!r}; expert demonstrations change "
        "with the environment's expert code), or fork a model fine-tuned on this run's demonstrations. To "
        "fine-tune the fork again, run the sft flow on it, then train without `sft`."
    )


def _stage_key(data: str, spec: dict[str, Any]) -> str | None:
    """sft_key of `data` under a recorded spec; None if that spec no longer validates."""
    try:
        return sft_key(data, SFTSpec(**spec))
    except ValueError:
        return None


def _unfinished_stages(store: "ModelStore", data: str, latest: int) -> list[dict[str, Any]]:
    """The SFT stages recorded for `data` on this model whose last epoch's checkpoint is past `latest`."""
    stages = recorded_stages(store)
    return [s for s in stages if s.get("data") == data and s["start_step"] + s["spec"]["epochs"] > latest]


def store_expert_demonstrations(
    storage_url: str,
    project: str,
    environment: str,
    split: str = "train",
    seed: int = 0,
    limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[str, Any]:
    """Build `environment`'s expert demonstrations (retail, airline, tau2-retail, tau2-airline:
    art_core.envs.experts) and write them as SFT JSONL under `{project}/demonstrations/` in
    storage; (their URI, the Demonstrations).

    `seed` is the environment's (it picks the database and the tasks, so it must be the one GRPO trains on);
    `limit`: only the first N scenarios of `split`; `options`: the environment's options, of which those the
    demonstrations depend on are used (`demonstration_options`: tau2's data folder, judge and skip_judged). The file's name
    ends with the digest of the expert's code (`expert_fingerprint`) and of those options: the same arguments
    and code write the same file, edited code another.

    >>> uri, demos = store_expert_demonstrations("./.art", "cs", "retail", limit=4)   # doctest: +SKIP
    >>> uri   # './.art/cs/demonstrations/retail-train-seed0-first4-<digest>.jsonl' (absolute)  # doctest: +SKIP
    """
    from art_core.envs.experts import build_demonstrations, demonstration_options, expert_fingerprint
    from art_core.storage import Storage

    kept = demonstration_options(environment, options or {})
    demos = build_demonstrations(environment, split, seed=seed, limit=limit, options=kept)  # type: ignore[arg-type]
    if not demos.rows:
        raise ValueError(f"no expert demonstration of {environment} {split}: {demos.summary()}")
    storage = Storage(storage_url)
    digest = expert_fingerprint(environment)
    if kept:  # another data folder, judge or set of tasks: another file
        digest += "-" + hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = f"{environment}-{split}-seed{seed}" + (f"-first{limit}" if limit is not None else "") + f"-{digest}.jsonl"
    uri = storage.join(project, "demonstrations", name)
    storage.write_text(uri, "".join(json.dumps(row) + "\n" for row in demos.rows))
    return uri, demos


def _read_text(path: str) -> str:
    import fsspec

    from art_core.storage import storage_options_from_env

    options = storage_options_from_env() if path.startswith("s3://") else {}
    with fsspec.open(path, "r", **options) as f:
        return f.read()


def sft_epoch(
    store: "ModelStore",
    base_model: str,
    data: str,
    spec: SFTSpec,
    epoch: int,
    step: int,
    train_config: "TrainConfig",
    *,
    servers: Iterable[Any] = (),
) -> "TrainResult":
    """Epoch `epoch` of an SFT run: checkpoint `step` -> `step + 1` on that epoch's shuffled examples; once."""
    if store.is_complete(step + 1):  # before reading the data: a finished epoch needs none of it
        return sft_and_record(store, base_model, [], TrainSFTConfig(), train_config, step)
    chunk = spec.chunks(read_sft_file(data))[epoch]
    return sft_and_record(store, base_model, chunk.trajectories, chunk.config, train_config, step, servers=servers)
