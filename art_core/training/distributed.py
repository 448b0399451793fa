"""Data-parallel train steps on torch.distributed: each rank trains a share of the step's sequences, the LoRA
gradients are summed over ranks, every rank takes the same optimizer step, and rank 0 writes the checkpoint.

One field says how many ranks a step uses, `TrainConfig.ranks`; `train_grpo_step` reads it. From a library,
LocalBackend or a Prefect flow, nothing else changes:

    train_grpo_step(..., config=TrainConfig(ranks=2), ...)   # spawns 2 local workers for this step

With `TrainConfig(ranks=N, ranks_on="ray")` the ranks are Ray actors on the cluster at RAY_ADDRESS, one GPU each,
so a step spans nodes (`run_on_ray_ranks`). Under torchrun the launcher has already made the processes; each runs
the step through torchrun_step.py:

    torchrun --nproc-per-node 8 -m art_core.training.torchrun_step --base-model /models/qwen7b ...

Why the result equals the single-process step (tests/training/test_distributed.py checks it):
  - every rank prepares the same sequences, shuffles them into the same mini-batches (same seed) and computes
    the aggregation weights over the whole mini-batch (losses.AGGREGATIONS: token_mean divides by the
    mini-batch's trainable tokens, not the rank's), so the rank losses add up to the step's loss;
  - a rank packs and trains only its share (`rank_share`: whole sequences, balanced by token count), and the
    gradients are summed (`all_reduce_gradients`) before clipping, so every rank clips the same global norm
    and AdamW takes the same update everywhere: the adapters never drift apart;
  - the checkpoint is the same adapter folder a single process writes, so a run trained on N ranks resumes
    on any number. Rank 0 writes it (atomically, COMPLETE last, checkpoints.py); the others wait on a barrier.
Prefix sharing (prefixes.py) stays exact: a group's sequences on one rank share their prefix; those split
over two ranks each compute it, which costs time, not correctness.

Sharding the base (`TrainConfig.shard_base`, fsdp.py): with it on, each rank holds 1/N of the frozen base's
decoder layers (FSDP2 `fully_shard`) and gathers a layer's weights only while it runs. The LoRA weights stay
whole on every rank and outside FSDP, so `all_reduce_gradients` is still their one reduction (FSDP reduces nothing:
the base is frozen), clipping sees the global norm and rank 0 writes the same adapter. Every pass is then a
collective, so each rank runs as many passes as the busiest (`fsdp.pad_to_lockstep`, idle passes without trained
tokens). tests/training/test_fsdp.py checks on CPU (gloo, 2 processes) that the sharded step equals the
1-process step and resumes on one process; 'auto' shards only on CUDA when the whole model leaves a rank too little
memory for a pass. Not measured on GPUs yet (docs/multi-gpu.md).

Failure: the launcher (`run_on_ranks`) polls its workers; the first one to die or raise fails the step
with `RankFailedError` naming the rank, and the others are stopped by pid. A rank that hangs without dying
is bounded by the collective timeout (`timeout_s`), after which its peers raise. A failed step wrote no
COMPLETE marker, so a rerun resumes from the last complete checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

TIMEOUT_S = 600.0  # collectives and rendezvous: a rank that stops answering fails its peers after this


@dataclass(frozen=True)
class Ranks:
    """This process's place in the step's process group."""

    rank: int
    world: int


class RankFailedError(RuntimeError):
    """One rank of a data-parallel step died or raised; the message names it, the other ranks were stopped."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


def current() -> Ranks | None:
    """This process's rank when a process group of more than one rank is up, else None (a plain step).

    >>> current() is None          # outside torchrun or run_on_ranks
    True
    """
    if "torch" not in sys.modules:  # no group can be up without torch imported: keep this check light
        return None
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    return Ranks(dist.get_rank(), dist.get_world_size())


def is_writer() -> bool:
    """True on the process that writes checkpoints: rank 0, or a process outside any group."""
    ranks = current()
    return ranks is None or ranks.rank == 0


def barrier() -> None:
    """Wait for every rank (a no-op outside a group)."""
    if current() is not None:
        import torch.distributed as dist

        dist.barrier()


def rank_share(lengths: Sequence[int], groups: Sequence[int], world: int) -> list[list[int]]:
    """Split sequences (by index) over `world` ranks, balancing tokens: longest first, each to the least
    loaded rank; among equally loaded ranks, one already holding the sequence's group (so prefixes stay
    shared), else the lowest. Deterministic: every rank computes the same split.

    >>> rank_share([10, 8, 6, 4], [0, 0, 1, 1], 2)
    [[0, 3], [1, 2]]
    """
    loads = [0] * world
    held: list[set[int]] = [set() for _ in range(world)]
    shares: list[list[int]] = [[] for _ in range(world)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        least = min(loads)
        tied = [r for r in range(world) if loads[r] == least]
        r = next((r for r in tied if groups[i] in held[r]), tied[0])
        shares[r].append(i)
        loads[r] += lengths[i]
        held[r].add(groups[i])
    return [sorted(s) for s in shares]


def all_reduce_gradients(params: list[Any]) -> None:
    """Sum the gradients of `params` over ranks, in place, as one flat buffer (one collective per step).
    A rank without sequences in a mini-batch contributes zeros."""
    import torch
    import torch.distributed as dist

    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def all_reduce_sums(values: list[float], device: Any = "cpu") -> list[float]:
    """Sum a list of numbers over ranks (float64); each rank gets the totals.

    >>> all_reduce_sums([1.0, 2.0])     # on 2 ranks with the same values       # doctest: +SKIP
    [2.0, 4.0]
    """
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def backend_name() -> str:
    """nccl where CUDA is, else gloo (CPU)."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(rank: int, world: int, store: Any = None, timeout_s: float = TIMEOUT_S) -> Ranks:
    """Join the step's process group (from torchrun's environment when `store` is None); pins CUDA's device to
    LOCAL_RANK first, so each rank trains on its own GPU."""
    import datetime

    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=timeout_s), "rank": rank, "world_size": world}
    if store is not None:
        kwargs["store"] = store
    else:
        kwargs["init_method"] = "env://"
    dist.init_process_group(backend_name(), **kwargs)
    return Ranks(rank, world)


# ---- launching N local workers ------------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:
    # A worker whose launcher died has no one to report to: it exits rather than becoming an orphan.
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def _join(rank: int, world: int, host: str, port: int, timeout_s: float, hosts_store: bool = False) -> None:
    """Join a launched step's process group through the rendezvous store at host:port (`hosts_store`: this rank
    listens for it), with the torchrun-style variables the step reads."""
    import datetime

    import torch.distributed as dist

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, is_master=hosts_store, wait_for_workers=False, timeout=timeout)
    init_process_group(rank, world, store=store, timeout_s=timeout_s)


def _call(target: str, kwargs: dict) -> str:
    """`target(**kwargs)` (a dotted function name), its result as JSON text."""
    import importlib

    module, _, attr = target.rpartition(".")
    result = getattr(importlib.import_module(module), attr)(**kwargs)
    return result.model_dump_json() if hasattr(result, "model_dump_json") else json.dumps(result)


def _worker(
    rank: int, world: int, port: int, timeout_s: float, parent: int, target: str, kwargs: dict, out_dir: str
) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    import torch.distributed as dist

    try:
        _join(rank, world, "127.0.0.1", port, timeout_s)
        result = _call(target, kwargs)
        if rank == 0:
            with open(os.path.join(out_dir, "result.json"), "w") as f:
                f.write(result)
        dist.destroy_process_group()
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.error"), "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)  # not sys.exit: a collective's threads may still hold the interpreter


def run_on_ranks(
    world: int,
    target: str,
    kwargs: dict[str, Any],
    *,
    timeout_s: float = TIMEOUT_S,
    on_start: Callable[[list[int]], None] | None = None,
) -> str:
    """Run `target(**kwargs)` (a dotted function name) in `world` fresh local processes joined by a process group
    (gloo on CPU, nccl on CUDA; the rendezvous store listens on 127.0.0.1 in this process, on a free port).
    Returns rank 0's result as JSON text. The first rank that dies or raises fails the call with
    `RankFailedError` naming it; every worker is stopped by pid before this returns or raises.
    `on_start(pids)` is called once the workers run (tests use it to kill one).

    >>> run_on_ranks(2, "art_core.training.trainer.train_grpo_step", {...})       # doctest: +SKIP
    '{"step": 1, "metrics": {...}, ...}'
    """
    import datetime
    import multiprocessing

    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    ctx = multiprocessing.get_context("spawn")  # fork would copy this process's threads and CUDA state
    with tempfile.TemporaryDirectory(prefix="art-ranks-") as out_dir:
        procs = [
            ctx.Process(
                target=_worker,
                args=(r, world, store.port, timeout_s, os.getpid(), target, kwargs, out_dir),
                name=f"art-rank-{r}",
            )
            for r in range(world)
        ]
        try:
            for p in procs:
                p.start()
            if on_start is not None:
                on_start([p.pid for p in procs])
            while True:
                codes = [p.exitcode for p in procs]
                failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    r = _cause(failed, codes, out_dir)
                    raise RankFailedError(_failure_message(r, world, procs[r].pid, codes[r], out_dir), r)
                if all(c == 0 for c in codes):
                    break
                time.sleep(0.05)
            with open(os.path.join(out_dir, "result.json")) as f:
                return f.read()
        finally:
            _stop(procs)


# What a rank raises when a peer of its collective is gone: the consequence of another rank's failure.
PEER_GONE = ("DistBackendError", "DistNetworkError", "DistStoreError", "Connection closed by peer", "Connection reset")


def _peer_gone(error: str) -> bool:
    """Whether a rank's error is a collective's complaint that a peer left (`PEER_GONE`), not its own failure."""
    return any(marker in error for marker in PEER_GONE)


def _rank_error(out_dir: str, rank: int) -> str | None:
    """The traceback a local rank wrote before it exited (`_worker`), None when it wrote none (killed)."""
    path = os.path.join(out_dir, f"rank{rank}.error")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def _cause(failed: list[int], codes: list[int | None], out_dir: str) -> int:
    """The failed rank to name among those seen failed in one poll: one killed by a signal first, then one whose
    error is its own rather than a collective's complaint that a peer left (a rank that raises makes rank 0,
    waiting in the next all-reduce, fail too, often within the same poll), then the lowest."""
    return min(failed, key=lambda r: ((codes[r] or 0) >= 0, _peer_gone(_rank_error(out_dir, r) or ""), r))


def _failure_message(rank: int, world: int, pid: int | None, code: int, out_dir: str) -> str:
    import signal

    if code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    else:
        how = f"exited with code {code}"
    message = f"rank {rank} of {world} (pid {pid}) {how} during the train step; the other ranks were stopped"
    error = _rank_error(out_dir, rank)
    if error is not None:
        message += f". Its error:\n{error}"
    return message


def _stop(procs: list[Any], grace_s: float = 5.0) -> None:
    """Terminate the workers still alive (by pid), kill those that ignore it, and reap them all."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            p.terminate()
    deadline = time.time() + grace_s
    for p in procs:
        if p.pid is None:
            continue
        p.join(max(0.0, deadline - time.time()))
        if p.exitcode is None:
            p.kill()
            p.join()


# ---- launching N ranks as Ray actors (across nodes) ----------------------------------------------------------
class RayRank:
    """One rank of a step as a Ray actor: `run` joins the step's process group (rank 0 hosts its rendezvous store
    on its own node) and runs the target there. One GPU per actor on a cluster with GPUs."""

    def rendezvous(self) -> tuple[str, int]:
        """Where the step's store listens: this node's address and a port free on it (asked of rank 0)."""
        import socket

        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def pid(self) -> int:
        return os.getpid()

    def run(self, rank: int, world: int, host: str, port: int, timeout_s: float, target: str, kwargs: dict) -> str:
        import torch.distributed as dist

        _join(rank, world, host, port, timeout_s, hosts_store=rank == 0)
        try:
            return _call(target, kwargs)
        finally:
            dist.destroy_process_group()


def run_on_ray_ranks(
    world: int,
    target: str,
    kwargs: dict[str, Any],
    *,
    address: str | None = None,
    timeout_s: float = TIMEOUT_S,
    on_start: Callable[[list[int]], None] | None = None,
) -> str:
    """`run_on_ranks` with the ranks as Ray actors on the cluster at `address` (None: RAY_ADDRESS, else a local
    cluster started here), so they can sit on several nodes: one GPU each where the cluster has GPUs, one CPU each
    otherwise. Rank 0's node hosts the rendezvous store. Returns rank 0's result as JSON text; the first rank that
    dies or raises fails the call with `RankFailedError` naming it, and every rank's actor is killed before this
    returns or raises. `on_start(pids)` gets the actors' process ids (tests kill one)."""
    from art_core.fanout import connect_ray

    ray = connect_ray(address)
    gpus = ray.cluster_resources().get("GPU", 0)
    if gpus and world > gpus:
        raise ValueError(f"TrainConfig.ranks is {world} but the Ray cluster has {gpus:g} GPU(s): one rank a GPU")
    resources = {"num_gpus": 1, "num_cpus": 0} if gpus else {"num_gpus": 0, "num_cpus": 1}
    actors = [ray.remote(RayRank).options(max_restarts=0, **resources).remote() for _ in range(world)]
    try:
        host, port = ray.get(actors[0].rendezvous.remote(), timeout=timeout_s)
        pids = ray.get([a.pid.remote() for a in actors], timeout=timeout_s)  # every rank placed before any joins
        pending = {a.run.remote(r, world, host, port, timeout_s, target, kwargs): r for r, a in enumerate(actors)}
        if on_start is not None:
            on_start(pids)
        result = None
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            try:
                value = ray.get(done[0])
            except Exception as first:
                rank, error = _ray_cause(ray, pending, done[0], first)
                raise RankFailedError(
                    f"rank {rank} of {world} (a Ray actor) failed during the train step; the other ranks were "
                    f"stopped. Its error:\n{error}",
                    rank,
                ) from None
            if pending.pop(done[0]) == 0:
                result = value
        return result
    finally:
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass


def _ray_cause(ray: Any, pending: dict, ref: Any, error: BaseException) -> tuple[int, BaseException]:
    """The failure to report: a rank whose actor died (within a second of the first failure) over one that
    raised, since the survivors' collective errors follow from the death; then a rank's own error over a
    collective's complaint that a peer left (`PEER_GONE`)."""
    from ray.exceptions import RayActorError

    failures = {pending[ref]: error}
    others = [r for r in pending if r is not ref]
    done, _ = ray.wait(others, num_returns=len(others), timeout=1.0) if others else ([], [])
    for r in done:
        try:
            ray.get(r)
        except Exception as e:
            failures[pending[r]] = e
    died = sorted(rank for rank, e in failures.items() if isinstance(e, RayActorError))
    rank = died[0] if died else min(failures, key=lambda r: (_peer_gone(str(failures[r])), r))
    return rank, failures[rank]


def train_grpo_step_on_ranks(**step_kwargs: Any):
    """`train_grpo_step` on `config.ranks` fresh processes (local, or Ray actors with `config.ranks_on='ray'`);
    the same arguments, the same TrainResult.

    >>> train_grpo_step_on_ranks(base_model=..., groups=..., config=TrainConfig(ranks=2), ...)  # doctest: +SKIP
    """
    return step_on_ranks("art_core.training.trainer.train_grpo_step", step_kwargs["config"], step_kwargs)


def step_on_ranks(target: str, config: Any, step_kwargs: dict[str, Any]):
    """A train step function (`target`, dotted: the GRPO or the SFT step) called with `step_kwargs` on
    `config.ranks` fresh processes, local or Ray actors (`config.ranks_on`), `config` being its TrainConfig;
    rank 0's TrainResult."""
    from art_core.training.result import TrainResult

    world = config.ranks
    if config.ranks_on == "ray":
        return TrainResult.model_validate_json(run_on_ray_ranks(world, target, step_kwargs))
    refuse_ranks_beyond_gpus(world)
    return TrainResult.model_validate_json(run_on_ranks(world, target, step_kwargs))


def refuse_ranks_beyond_gpus(ranks: int) -> None:
    """Raise ValueError when `ranks` local ranks would outnumber the GPUs visible here (one rank a GPU). With no
    GPU visible the ranks are CPU processes (gloo), any number of them.

    >>> refuse_ranks_beyond_gpus(8)   # on a node whose CUDA_VISIBLE_DEVICES lists 4   # doctest: +SKIP
    ValueError: TrainConfig.ranks is 8 but 4 GPU(s) are visible here (CUDA_VISIBLE_DEVICES=0,1,2,3): one rank a GPU
    """
    import torch

    gpus = torch.cuda.device_count()
    if gpus and ranks > gpus:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        raise ValueError(
            f"TrainConfig.ranks is {ranks} but {gpus} GPU(s) are visible here (CUDA_VISIBLE_DEVICES={visible}): "
            "one rank a GPU"
        )
