"""The trainer session: what every train step (GRPO, trainer.py; SFT, sft.py) does around its own passes.

    with trainer_session(base_model, config, storage, project, name, step) as session:
        session.model, session.optimizer, session.tokenizer    # checkpoint `step`, this step's hyperparameters
        ...                                                    # the step's forward and backward passes
        path = session.save({"step": step + 1, ...})           # checkpoint step + 1, now the one in memory

Opening a session, in order:
 1. lock: one step at a time per process, since the loaded model is shared between steps and runs,
 2. load: the base model with a seeded fresh LoRA, once per base model and LoRA shape (kept in this process),
 3. restore: the adapter and optimizer of checkpoint `step`, unless they are the ones in memory already,
 4. hyperparameters: the learning rate and Adam's settings written over whatever the restore brought.
A step that raises leaves its adapter half-updated: the session forgets what it holds, so the next step
restores from storage. `release_cuda_cache` gives the trainer's free GPU blocks back before vLLM wakes.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from art_core.storage import Storage
from art_core.training import fsdp
from art_core.training.checkpoints import load_checkpoint, save_checkpoint
from art_core.training.config import TrainConfig
from art_core.training.precision import choose_train_dtype

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A base model with its LoRA adapter and optimizer, kept between steps of one process."""

    model: Any  # peft.PeftModel
    tokenizer: Any
    device: Any
    lora_key: tuple
    initial_adapter: dict[str, Any]  # the seeded fresh LoRA, restored when a new run starts at step 0
    optimizer: Any = None  # torch.optim.AdamW over the LoRA parameters, built by TrainerSession.restore
    owner: tuple | None = None  # (storage root, project, name, step) whose state is in memory now


_CACHE: dict[str, LoadedModel] = {}
_LOCK = threading.Lock()  # one step at a time per process: the cached model is shared


def clear_model_cache() -> None:
    """Forget loaded models, so the next step reloads from storage (tests, or to free memory)."""
    with _LOCK:
        _CACHE.clear()


def loaded_model(base_model: str) -> LoadedModel | None:
    """The model, adapter and optimizer in memory for `base_model` as the last step left them; None if none.

    >>> loaded_model("/models/tiny").model     # the LoRA model as trained so far       # doctest: +SKIP
    """
    return _CACHE.get(base_model)


class TrainerSession:
    """One step's hold on the loaded model: checkpoint `step` of `project/name` in `storage`, trained from
    `base_model` with `config` (see the module docstring). Made by `trainer_session`."""

    def __init__(
        self,
        loaded: LoadedModel,
        base_model: str,
        config: TrainConfig,
        storage: Storage,
        project: str,
        name: str,
        step: int,
        started: float | None = None,
    ) -> None:
        self.loaded, self.base_model, self.config = loaded, base_model, config
        self.storage, self.project, self.name, self.step = storage, project, name, step
        self.started = time.time() if started is None else started  # when the step began: its metrics' seconds

    @property
    def model(self) -> Any:
        return self.loaded.model

    @property
    def optimizer(self) -> Any:
        return self.loaded.optimizer  # a new one after restore(): read it from here, not once

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def device(self) -> Any:
        return self.loaded.device

    def restore(self) -> None:
        """Put the adapter and optimizer of checkpoint `step` in memory (nothing to do if they are there)."""
        import torch
        from peft import set_peft_model_state_dict

        owner = (self.storage.root, self.project, self.name, self.step)
        state = self.loaded
        if state.owner == owner:
            return
        params = [p for p in state.model.parameters() if p.requires_grad]
        # No hyperparameters here: a checkpoint's optimizer state brings its own, set_hyperparameters writes over them.
        state.optimizer = torch.optim.AdamW(params)
        if self.step == 0:
            set_peft_model_state_dict(state.model, state.initial_adapter)
        else:
            load_checkpoint(self.storage, self.project, self.name, self.step, state.model, state.optimizer)
        state.owner = owner

    def set_hyperparameters(self, learning_rate: float | None = None) -> None:
        """Write the step's learning rate (`learning_rate`, default config.learning_rate) and Adam's settings into
        the optimizer: the one place they reach it.

        Called when the session opens, after any restore (as ART does), so a run can change them between steps
        without losing Adam's state; SFT calls it again before each batch with that batch's scheduled rate.
        """
        config = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = config.learning_rate if learning_rate is None else learning_rate
            group["betas"] = (config.adam_beta1, config.adam_beta2)
            group["eps"] = config.adam_epsilon
            group["weight_decay"] = config.weight_decay

    def set_checkpointing(self, on: bool) -> None:
        """Activation checkpointing on or off for this step's passes."""
        # Per step, not at load: the cached model serves runs with different configs.
        causal_lm = self.model.get_base_model()
        if on:
            # Non-reentrant: correct with frozen embeddings (LoRA) without forcing input grads.
            causal_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif causal_lm.is_gradient_checkpointing:
            causal_lm.gradient_checkpointing_disable()

    def rewind(self) -> None:
        """Free what a failed try held and put checkpoint `step` and the step's hyperparameters back (an optimizer
        step may have run before the failure), to run the step again."""
        import gc

        self.optimizer.zero_grad(set_to_none=True)
        self.loaded.owner = None
        gc.collect()  # the failed pass's activations, held through its traceback's frames
        release_cuda_cache()
        self.restore()
        self.set_hyperparameters()

    def save(self, info: dict[str, Any]) -> str:
        """Write checkpoint `step + 1` (adapter, optimizer, tokenizer and `info`); it is the one in memory now.
        Returns its path. In a data-parallel step (distributed.py) rank 0 writes it, the others wait for it: their
        adapters and optimizers are the same."""
        from art_core.store import ModelStore
        from art_core.training import distributed

        target = self.step + 1
        if distributed.is_writer():
            path = save_checkpoint(
                self.storage,
                self.project,
                self.name,
                target,
                self.model,
                self.optimizer,
                info,
                tokenizer=self.tokenizer,
            )
        else:
            path = ModelStore(self.storage, self.project, self.name).checkpoint(target)
        distributed.barrier()
        self.loaded.owner = (self.storage.root, self.project, self.name, target)
        return path


@contextmanager
def trainer_session(
    base_model: str, config: TrainConfig, storage: Storage, project: str, name: str, step: int
) -> Iterator[TrainerSession]:
    """Hold the trainer for one step from checkpoint `step`: locked, loaded, restored, hyperparameters set, the
    model in train mode. If the step raises, the adapter in memory is forgotten (it may be half-updated).

    >>> with trainer_session("/models/tiny", TrainConfig(), Storage("./.art"), "demo", "agent", 0) as s:  # doctest: +SKIP
    ...     s.save({"step": 1})
    './.art/demo/models/agent/checkpoints/0001'
    """
    with _LOCK:
        started = time.time()  # once the lock is held: a step's seconds count its load, not waiting for another step
        try:
            if step < 0:
                raise ValueError(f"step must be >= 0, got {step}")
            session = TrainerSession(
                _load(base_model, config), base_model, config, storage, project, name, step, started
            )
            session.restore()
            session.model.train()  # callers may have sampled from the cached model in eval mode (LoRA dropout on)
            session.set_hyperparameters()
            yield session
        except BaseException:
            if base_model in _CACHE:  # the adapter may be half-updated: the next step restores from storage
                _CACHE[base_model].owner = None
            raise


def _load(base_model: str, config: TrainConfig) -> LoadedModel:
    """The cached model for `base_model`, loaded (and wrapped with a seeded LoRA) on first use."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from art_core.training import distributed

    may_shard = distributed.current() is not None or config.shard_base == "on"
    lora_key = _lora_key(config, may_shard)
    cached = _CACHE.get(base_model)
    if cached is not None and cached.lora_key == lora_key:
        return cached
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = AutoConfig.from_pretrained(base_model)
    dtype_name, why = choose_train_dtype(
        config.dtype,
        device.type,
        int(getattr(shape, "hidden_size", 0) or 0),
        int(getattr(shape, "intermediate_size", 0) or 0),
    )
    log.info("training %s in %s on %s: %s", base_model, dtype_name, device.type, why)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    shard = may_shard and _want_sharding(base_model, config, shape, torch.finfo(dtype).bits // 8, device)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if shard and distributed.current().rank > 0:  # rank 0 reads the weights and sends each rank its shards
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(shape, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
    if not shard:  # a sharded base moves to the device shard by shard (fsdp.shard_base)
        model = model.to(device)
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(config.seed)  # the LoRA A matrices are random: same seed, same adapter
    model = get_peft_model(model, lora)
    if shard:
        held = fsdp.shard_base(model, device)
        log.info("%s: %d modules sharded, %.3f GiB of weights here", base_model, held["units"], held["held_gib"])
    model.train()
    initial = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
    loaded = LoadedModel(model, tokenizer, device, lora_key, initial)
    _CACHE[base_model] = loaded
    return loaded


def _lora_key(config: TrainConfig, may_shard: bool) -> tuple:
    """What a cached model was built with: another key loads it again. A plain step's key leaves sharding out."""
    key = (
        config.lora_rank,
        config.lora_alpha,
        config.lora_dropout,
        tuple(config.lora_target_modules),
        config.seed,
        config.dtype,
    )
    return key + (config.shard_base,) if may_shard else key


def _want_sharding(base_model: str, config: TrainConfig, shape: Any, dtype_bytes: int, device: Any) -> bool:
    shard, why = fsdp.want_sharding(config, shape, dtype_bytes, device)
    log.info("base model %s sharded over the step's ranks: %s (%s)", base_model, "yes" if shard else "no", why)
    return shard


def release_cuda_cache() -> None:
    """Give the trainer's cached-but-free GPU blocks back (before vLLM wakes up and re-allocates); a no-op on CPU."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
