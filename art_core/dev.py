"""`art_core.dev`: ART's unstable configuration names (`art.dev`), accepted and mapped onto ours.

ART users pass these dicts to `TrainableModel(_internal_config=...)`, `model.train(_config=...)` and
`backend.train(model, groups, **kwargs)`. Each key that has a counterpart here becomes a field of our
`TrainConfig` (art_core.training.config) or `ServerConfig` (art_core.inference.server); each key
without one (Unsloth, TRL and CUDA-engine internals) is reported once in a warning, never silently
dropped:

    model = art.TrainableModel(name="003", project="2048", base_model=path,
        _internal_config=art.dev.InternalModelConfig(
            init_args=art.dev.InitArgs(max_seq_length=8192),          # -> TrainConfig.max_seq_len
            engine_args=art.dev.EngineArgs(enforce_eager=True),       # -> vLLM --enforce-eager
            peft_args=art.dev.PeftArgs(r=8, lora_alpha=16),           # -> lora_rank, lora_alpha
            trainer_gpu_ids=[0], inference_gpu_ids=[1]))              # -> ranks 1; vLLM on GPU 1 (gpu_split)

The table of every name is in docs/art-compatibility.md.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Mapping

from typing_extensions import TypedDict


class InitArgs(TypedDict, total=False):
    """ART's Unsloth `from_pretrained` settings; `max_seq_length` maps to TrainConfig.max_seq_len."""

    max_seq_length: int
    model_name: str
    dtype: str | None
    load_in_4bit: bool
    fast_inference: bool
    gpu_memory_utilization: float
    max_lora_rank: int
    enable_prefix_caching: bool


class EngineArgs(TypedDict, total=False):
    """vLLM engine settings. Mapped: gpu_memory_utilization, max_model_len, max_lora_rank, max_loras,
    enable_sleep_mode; any other vLLM flag (enforce_eager, max_num_seqs, ...) is passed to our server."""

    gpu_memory_utilization: float
    max_model_len: int
    enforce_eager: bool
    max_num_seqs: int
    enable_prefix_caching: bool
    enable_sleep_mode: bool
    num_scheduler_steps: int
    max_lora_rank: int
    max_loras: int
    disable_log_stats: bool


class PeftArgs(TypedDict, total=False):
    """LoRA settings: r, lora_alpha, lora_dropout, target_modules map to TrainConfig's lora_* fields."""

    r: int
    lora_alpha: int
    lora_dropout: float
    target_modules: list[str]
    use_gradient_checkpointing: bool | str
    random_state: int


class TrainerArgs(TypedDict, total=False):
    """TRL/transformers trainer settings: the optimiser ones and `run_name` are mapped."""

    learning_rate: float
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    max_grad_norm: float
    seed: int
    run_name: str | None
    optim: str
    gradient_accumulation_steps: int


class InternalModelConfig(TypedDict, total=False):
    """`TrainableModel(_internal_config=...)`: see the module docstring for what each part maps to."""

    init_args: InitArgs
    engine_args: EngineArgs
    peft_args: PeftArgs
    trainer_args: TrainerArgs
    torchtune_args: dict[str, Any]
    tinker_args: dict[str, Any]
    trainer_gpu_ids: list[int]
    inference_gpu_ids: list[int]
    rollout_weight_update_mode: str
    chat_template: str


class TrainConfig(TypedDict, total=False):
    """ART's `_config` / backend.train keywords (2025 and 2026 names); see TRAIN_KEYS for the mapping."""

    learning_rate: float
    beta: float
    kl_penalty_coef: float
    epsilon: float
    epsilon_high: float | None
    ppo: bool
    scale_rewards: bool
    precalculate_logprobs: bool
    allow_training_without_logprobs: bool
    logprob_calculation_chunk_size: int
    importance_sampling_level: str
    max_negative_advantage_importance_sampling_weight: float
    truncated_importance_sampling: float | None
    advantage_balance: float
    mask_prob_ratio: bool
    kimi_k2_tau: float | None
    scale_learning_rate_by_reward_std_dev: bool
    save_checkpoint: bool
    normalize_by_length: bool
    loss_type: str
    kl_ref_adapter_path: str | None


class ServerArgs(TypedDict, total=False):
    """vLLM OpenAI-server settings (`OpenAIServerConfig.server_args`)."""

    host: str | None
    port: int
    api_key: str | None
    tool_call_parser: str | None
    return_tokens_as_token_ids: bool
    enable_auto_tool_choice: bool


class OpenAIServerConfig(TypedDict, total=False):
    """ART's `LocalBackend` server config: `server_args` and `engine_args` map onto our ServerConfig."""

    log_file: str
    server_args: ServerArgs
    engine_args: EngineArgs


# ART's / TRL's loss_type names the token aggregation: per-sequence means, a token mean, or Dr. GRPO's constant.
_LOSS_TYPES = {"grpo": "sequence_mean", "bnpo": "token_mean", "dapo": "token_mean", "dr_grpo": "constant_norm"}
# ART name -> (our TrainConfig field, value converter). Keys absent here are reported, not applied.
TRAIN_KEYS: dict[str, tuple[str, Any]] = {
    "learning_rate": ("learning_rate", float),
    "beta": ("beta", float),
    "kl_penalty_coef": ("beta", float),
    "epsilon": ("epsilon", float),
    "epsilon_high": ("epsilon_high", lambda v: None if v is None else float(v)),
    "scale_rewards": ("scale_rewards", bool),
    "ppo": ("loss", lambda v: "clipped_ratio" if v else "cispo"),  # ART: ppo=False is its CISPO-style loss
    "precalculate_logprobs": ("old_logprobs", lambda v: "recompute" if v else "sampler"),
    "importance_sampling_level": ("importance_sampling_level", str),  # token | sequence (GSPO) | average | ...
    "truncated_importance_sampling": ("truncated_importance_sampling", lambda v: None if v is None else float(v)),
    "normalize_by_length": ("normalize_by_length", bool),  # False: Dr. GRPO's constant normaliser
    "loss_type": ("aggregation", lambda v: _LOSS_TYPES.get(v, v)),  # TRL/ART grpo | bnpo | dr_grpo
    "kimi_k2_tau": ("kimi_k2_tau", lambda v: None if v is None else float(v)),
    "advantage_balance": ("advantage_balance", float),
    "kl_ref_adapter_path": ("kl_ref_adapter_path", lambda v: None if v is None else str(v)),
    # ART's init/peft/trainer args
    "max_seq_length": ("max_seq_len", int),
    "r": ("lora_rank", int),
    "lora_alpha": ("lora_alpha", int),
    "lora_dropout": ("lora_dropout", float),
    "target_modules": ("lora_target_modules", list),
    "weight_decay": ("weight_decay", float),
    "adam_beta1": ("adam_beta1", float),
    "adam_beta2": ("adam_beta2", float),
    "adam_epsilon": ("adam_epsilon", float),
    "max_grad_norm": ("max_grad_norm", float),
    "seed": ("seed", int),
    "logprob_calculation_chunk_size": ("logit_chunk_tokens", int),  # both: positions per chunk through the LM head
}
# Accepted and meaningful, but with nothing to set: why, per key (said once in the warning).
NO_EFFECT: dict[str, str] = {
    "allow_training_without_logprobs": "our server returns logprobs and token ids on every request",
    "save_checkpoint": "every step is checkpointed (that is how the next step is served)",
}
# ART name -> our ServerConfig field; other engine_args become vLLM CLI flags.
SERVER_KEYS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "max_lora_rank": "max_lora_rank",
    "max_loras": "max_loras",
    "enable_sleep_mode": "enable_sleep_mode",
    "tool_call_parser": "tool_call_parser",
    "api_key": "api_key",
    "port": "port",
    "host": "host",
    "dtype": "dtype",
    "enable_prefix_caching": "enable_prefix_caching",
    "max_num_seqs": "max_num_seqs",
}
# vLLM 0.8 / Unsloth-only engine flags that the vLLM we run no longer has.
ENGINE_GONE = {
    "num_scheduler_steps",
    "disable_log_requests",
    "fast_inference",
    "load_in_4bit",
    "model_name",
    "use_gradient_checkpointing",
    "random_state",
    "enable_auto_tool_choice",
    "return_tokens_as_token_ids",
    "model",
    "served_model_name",
    "generation_config",
}

_warned: set[tuple[str, str]] = set()


def warn_unsupported(where: str, names: Iterable[str], why: str = "no counterpart here; ignored") -> None:
    """One warning per (where, name) per process: ART configs are often re-sent every step."""
    new = sorted(n for n in names if (where, n) not in _warned)
    if not new:
        return
    _warned.update((where, n) for n in new)
    warnings.warn(f"art_core: {where}: {', '.join(new)}: {why}", UserWarning, stacklevel=3)


def train_overrides(options: Mapping[str, Any] | None, where: str = "train config") -> dict[str, Any]:
    """Our TrainConfig fields for ART train options (dev.TrainConfig keys or backend.train keywords).

    Unknown and unsupported keys are reported once in a warning.

        >>> train_overrides({"epsilon": 0.1, "ppo": True})
        {'epsilon': 0.1, 'loss': 'clipped_ratio'}
    """
    from art_core.training.config import TrainConfig as OurTrainConfig

    out: dict[str, Any] = {}
    ignored = []
    for key, value in (options or {}).items():
        if key in OurTrainConfig.model_fields and key not in TRAIN_KEYS:  # our own field names pass through
            out[key] = value
        elif key in TRAIN_KEYS:
            field, convert = TRAIN_KEYS[key]
            out[field] = convert(value)
        elif key in NO_EFFECT:
            warn_unsupported(where, [key], f"accepted, no effect here: {NO_EFFECT[key]}")
        else:
            ignored.append(key)
    if ignored:
        warn_unsupported(
            where,
            ignored,
            "ART options with no counterpart in art_core's trainer; ignored "
            "(docs/art-compatibility.md lists what each does here)",
        )
    return out


GPU_KEYS = ("trainer_gpu_ids", "inference_gpu_ids")


def gpu_split(internal: Mapping[str, Any] | None) -> tuple[list[int], list[int]] | None:
    """ART's dedicated mode, checked: (trainer_gpu_ids, inference_gpu_ids), or None when neither is given.

    Ids count the GPUs this process sees. The trainer's must be 0..n-1, as in ART: rank 0 trains in this process
    on cuda:0 and rank r on cuda:r, so they set TrainConfig.ranks = n. The server gets the inference ids
    (ServerOptions.gpu_ids). Unlike ART, the two may overlap: the server then sleeps while a step trains.

        >>> gpu_split({"trainer_gpu_ids": [0, 1], "inference_gpu_ids": [2]})
        ([0, 1], [2])
    """
    given = [k for k in GPU_KEYS if k in (internal or {})]
    if not given:
        return None
    if len(given) == 1:
        other = GPU_KEYS[1 - GPU_KEYS.index(given[0])]
        raise ValueError(
            f"_internal_config sets {given[0]} without {other}: ART's dedicated mode needs both (e.g. "
            "trainer_gpu_ids=[0], inference_gpu_ids=[1]); set both, or neither to share every GPU"
        )
    ids: dict[str, list[int]] = {}
    for key in GPU_KEYS:
        value = internal[key]  # type: ignore[index]
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in value):
            raise ValueError(f"_internal_config.{key}={value!r}: give a list of GPU ids (numbers from 0)")
        if not value:
            raise ValueError(f"_internal_config.{key} is empty: name at least one GPU (e.g. [0]), or drop both ids")
        if len(set(value)) != len(value):
            raise ValueError(f"_internal_config.{key}={list(value)} names a GPU twice: list each GPU once")
        ids[key] = list(value)
    trainer = ids["trainer_gpu_ids"]
    if trainer != list(range(len(trainer))):
        raise ValueError(
            f"_internal_config.trainer_gpu_ids={trainer}: the trainer's GPUs must be 0..n-1 (e.g. [0] or [0, 1]), "
            "as in ART: rank 0 trains in this process on cuda:0. Put the server on the other GPUs with "
            "inference_gpu_ids, or reorder the GPUs with CUDA_VISIBLE_DEVICES"
        )
    return trainer, ids["inference_gpu_ids"]


def model_train_overrides(internal: Mapping[str, Any] | None) -> dict[str, Any]:
    """TrainConfig fields from `_internal_config`'s init_args, peft_args and trainer_args (run_name excluded), and
    `ranks` from trainer_gpu_ids (one rank a GPU)."""
    if not internal:
        return {}
    out: dict[str, Any] = {}
    split = gpu_split(internal)
    if split is not None:
        out["ranks"] = len(split[0])
    init = dict(internal.get("init_args") or {})
    if "max_seq_length" in init:
        out.update(train_overrides({"max_seq_length": init.pop("max_seq_length")}))
    unused = [f"init_args.{k}" for k in init if k not in ENGINE_GONE and k not in SERVER_KEYS]
    out.update(train_overrides(internal.get("peft_args"), "_internal_config.peft_args"))
    trainer = {k: v for k, v in (internal.get("trainer_args") or {}).items() if k != "run_name"}
    out.update(train_overrides(trainer, "_internal_config.trainer_args"))
    others = set(internal) - {"init_args", "engine_args", "peft_args", "trainer_args", *GPU_KEYS}
    warn_unsupported(
        "_internal_config",
        unused + sorted(others),
        "Unsloth/TRL/torchtune/Tinker settings with no counterpart in art_core; ignored",
    )
    return out


def server_overrides(internal: Mapping[str, Any] | None) -> dict[str, Any]:
    """Our ServerConfig fields from `_internal_config`'s engine_args (and init_args' gpu_memory_utilization).

    Flags our ServerConfig has no field for are passed to vLLM as CLI flags (`enforce_eager=True` ->
    `--enforce-eager`); flags of ART's vLLM 0.8 engine that today's vLLM lacks are reported.

        >>> server_overrides({"engine_args": {"enforce_eager": True, "gpu_memory_utilization": 0.5}})
        {'gpu_memory_utilization': 0.5, 'extra_args': ['--enforce-eager']}
    """
    if not internal:
        return {}
    engine = {
        **{k: v for k, v in (internal.get("init_args") or {}).items() if k in SERVER_KEYS},
        **dict(internal.get("engine_args") or {}),
    }
    out = engine_to_server(engine, "_internal_config.engine_args")
    split = gpu_split(internal)
    if split is not None:
        out["gpu_ids"] = split[1]  # the server's CUDA_VISIBLE_DEVICES (and tensor parallel size)
    return out


def engine_to_server(engine: Mapping[str, Any], where: str) -> dict[str, Any]:
    """ServerConfig fields (plus `extra_args` CLI flags) for vLLM engine/server arguments."""
    out: dict[str, Any] = {}
    flags: list[str] = []
    gone = []
    for key, value in engine.items():
        if key in SERVER_KEYS:
            out[SERVER_KEYS[key]] = value
        elif key in ENGINE_GONE:
            gone.append(key)
        elif isinstance(value, bool):
            flags += [f"--{key.replace('_', '-')}"] if value else []
        elif value is not None:
            flags += [f"--{key.replace('_', '-')}", str(value)]
    if flags:
        out["extra_args"] = flags
    warn_unsupported(where, gone, "settings of ART's Unsloth/vLLM 0.8 engine that today's vLLM lacks; ignored")
    return out


def openai_server_overrides(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """ServerConfig fields for ART's `OpenAIServerConfig` (`log_file` -> log_path, server and engine args)."""
    if not config:
        return {}
    out = engine_to_server(
        {**(config.get("server_args") or {}), **(config.get("engine_args") or {})}, "OpenAIServerConfig"
    )
    if config.get("log_file"):
        out["log_path"] = config["log_file"]
    return out


def get_model_config(base_model: str, output_dir: str, config: InternalModelConfig | None) -> InternalModelConfig:
    """ART's helper: the internal config with defaults filled in. Here: `config` as given (our defaults live
    in TrainConfig and ServerConfig)."""
    return InternalModelConfig(**(config or {}))


__all__ = [
    "EngineArgs",
    "InitArgs",
    "InternalModelConfig",
    "OpenAIServerConfig",
    "PeftArgs",
    "ServerArgs",
    "TrainConfig",
    "TrainerArgs",
    "get_model_config",
    "gpu_split",
    "model_train_overrides",
    "openai_server_overrides",
    "server_overrides",
    "train_overrides",
]


def resolve_train_config(
    model: Any, config: Any = None, _config: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None
) -> Any:
    """One TrainConfig: the model's `_internal_config`, then `config`'s explicit fields, then ART's `_config`
    keys, then backend.train keywords (later wins). Idempotent: a resolved config resolves to itself.

        >>> resolve_train_config(None, None, {"epsilon": 0.1}, {"learning_rate": 1e-3}).learning_rate
        0.001
    """
    from art_core.training.config import TrainConfig

    if config is None:
        config = TrainConfig()
    elif not isinstance(config, TrainConfig):  # a dict, or another pydantic model with ART's field names
        raw = config.model_dump(exclude_unset=True) if hasattr(config, "model_dump") else dict(config)
        config = TrainConfig(**train_overrides(raw, "TrainConfig"))
    internal = getattr(model, "_internal_config", None)
    values = {
        **model_train_overrides(internal),
        **config.model_dump(include=config.model_fields_set),
        **train_overrides(_config, "_config"),
        **train_overrides(options, "backend.train"),
    }
    split = gpu_split(internal)
    if split is not None:
        _check_ranks_on_trainer_gpus(split[0], values)
    return TrainConfig(**values)


def _check_ranks_on_trainer_gpus(trainer: list[int], values: Mapping[str, Any]) -> None:
    """A train config that contradicts `_internal_config.trainer_gpu_ids` (one rank a trainer GPU) is refused."""
    if values.get("ranks", len(trainer)) != len(trainer):
        raise ValueError(
            f"ranks={values['ranks']} but _internal_config.trainer_gpu_ids={trainer} trains on {len(trainer)} GPU(s), "
            f"one rank each: drop ranks (the ids set it) or make it {len(trainer)}"
        )
    if values.get("ranks_on", "local") != "local":
        raise ValueError(
            f"ranks_on={values['ranks_on']!r} lets Ray place the step's ranks, but _internal_config.trainer_gpu_ids="
            f"{trainer} places them on this machine's GPUs: drop one of them"
        )
