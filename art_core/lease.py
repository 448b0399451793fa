"""One writer per model: a lease on `{project}/models/{name}` in storage, held by the run that trains it.

Two runs training one model into one storage overwrite each other's checkpoints. So a run that trains (the
train and sft flows, `LocalBackend.register` of a TrainableModel) takes this lease before any work and
releases it when it ends; a second run is refused with an error naming the holder. Evaluation and deploy
only read, and take no lease.

    lease = acquire_model_lease(store, run_id="flow-run-1234", run="Prefect flow run 'train'")
    try:
        ...                      # train; lease.check() before each step raises LeaseLost if taken over
    finally:
        lease.release()

or `with model_lease(store, run_id=...) as lease: ...`.

The lease is a folder of generation files, `{model}/lease/{generation:08d}.json`; the highest generation is the
current one. Each names its owner (host, process id, run id, started-at) and a heartbeat that a daemon thread
rewrites every `timeout_s / 6` seconds. Taking the lease creates the next generation with an atomic create:
on a local disk a hard link of a finished temporary file (fails if the name exists), on S3 a conditional
put (`If-None-Match: *`, s3fs `mode="create"`; AWS and moto honour it). So when two runs find the lease free,
or the same stale one, exactly one creates the next generation and the other reads it and is refused. An
S3-compatible store that ignores `If-None-Match` would let both creates succeed: the file is read back after
the create, and each heartbeat re-reads it, so the loser of such a race finds out (LeaseLost) at its first
heartbeat at the latest. A release rewrites the generation as released (it stays, as a record of the last
run); older generations are deleted by the next owner.

A lease is free when it is released, when its heartbeat is older than `timeout_s` (ART_LEASE_TIMEOUT,
default 180 s; heartbeats are wall-clock times, so hosts' clocks must agree to well within that), or at
once when its owner was a process on this host (same host name and process-id namespace) that no longer
exists (a SIGKILLed run re-run on the same machine resumes without waiting). A free lease that was not
released is taken over with a warning. A live one is taken over only when asked: `takeover=True`, or
ART_LEASE_TAKEOVER=1 for that one run; the run that held it notices at its next heartbeat and its next
`check()` raises LeaseLost.

Re-entrant by run id: taking the lease again under the run id that holds it in this process counts up
(release counts down), and a new process with the same run id (a retried flow run) takes it over quietly.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Iterator

from pydantic import BaseModel, ValidationError

from art_core.storage import Storage

if TYPE_CHECKING:
    from art_core.store import ModelStore

log = logging.getLogger(__name__)


class LeaseHeld(RuntimeError):
    """Another live run holds the model's lease: this run is refused before any work."""


class LeaseLost(RuntimeError):
    """This run's lease was taken over by another run (or its file vanished): stop writing the model."""


class LeaseOwner(BaseModel):
    """One generation file of a lease: who holds (or held) it."""

    run_id: str
    run: str  # what the run is, in words (a Prefect flow run's name, "LocalBackend")
    host: str
    pid: int
    pid_namespace: str | None = None  # /proc/self/ns/pid: process ids compare only within one namespace
    process_started: int | None = None  # the process's start time (clock ticks since boot): a reused pid differs
    started_at: float  # epoch seconds
    heartbeat_at: float
    released_at: float | None = None
    generation: int
    token: str  # this acquisition's own id: a read-back tells our file from another writer's

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        return (
            f"run {self.run_id} ({self.run}) on host {self.host}, pid {self.pid}, started {_when(self.started_at)}, "
            f"last heartbeat {_when(self.heartbeat_at)} ({max(0.0, now - self.heartbeat_at):.0f} s ago)"
        )


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(t))


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _process_started(pid: int) -> int | None:
    """Field 22 of /proc/{pid}/stat (start time in clock ticks since boot); None where /proc is missing."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name, in parentheses, may hold spaces
    return int(fields[19]) if len(fields) > 19 else None


def _process_alive(pid: int, started: int | None) -> bool:
    """Whether process `pid`, started at `started`, still runs on this host (a zombie does not run)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[-1].split()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): whether any process has that id
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields and fields[0] in ("Z", "X"):  # exited, not yet reaped by its parent
        return False
    return started is None or len(fields) <= 19 or int(fields[19]) == started


def _env_timeout() -> float:
    from art_core.settings import get_settings

    return float(get_settings().lease_timeout_s)


def _env_takeover() -> bool:
    from art_core.settings import get_settings

    return bool(get_settings().lease_takeover)


class ModelLease:
    """The lease on one model, for one run. Use acquire_model_lease() (re-entrant) rather than this directly.

    >>> lease = ModelLease(Storage("/tmp/art"), "/tmp/art/demo/models/agent/lease", run_id="r1").acquire()
    >>> lease.release()
    """

    def __init__(
        self,
        storage: Storage,
        folder: str,
        *,
        run_id: str,
        run: str = "",
        label: str = "",
        timeout_s: float | None = None,
        heartbeat_s: float | None = None,
        takeover: bool | None = None,
    ) -> None:
        self.storage, self.folder = storage, folder.rstrip("/")
        self.run_id, self.run = run_id, run or run_id
        self.label = label or self.folder  # what the messages call the model (project/name)
        self.timeout_s = _env_timeout() if timeout_s is None else float(timeout_s)
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else min(30.0, self.timeout_s / 6)
        self.takeover = _env_takeover() if takeover is None else takeover
        self.owner: LeaseOwner | None = None  # ours, once acquired
        self.lost: str | None = None  # why we no longer hold it (set by the heartbeat thread)
        self.refs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()  # the heartbeat and release never write at once

    def __repr__(self) -> str:
        return f"ModelLease({self.folder!r}, run_id={self.run_id!r}, held={self.owner is not None})"

    # ---- files ----------------------------------------------------------------------------------
    def _path(self, generation: int) -> str:
        return self.storage.join(self.folder, f"{generation:08d}.json")

    def _generations(self) -> list[int]:
        fs = self.storage.fs
        fs.invalidate_cache(self.folder)  # s3fs caches listings: another process's create must show
        try:
            names = fs.ls(self.folder, detail=False)
        except FileNotFoundError:
            return []
        gens = []
        for name in names:
            stem = name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
            if stem.isdigit() and name.endswith(".json"):
                gens.append(int(stem))
        return sorted(gens)

    def _read(self, generation: int) -> LeaseOwner | None:
        """The generation's record; None if it vanished. A damaged file reads as a released lease (warned)."""
        path = self._path(generation)
        try:
            raw = self.storage.fs.cat_file(path)
        except FileNotFoundError:
            return None
        try:
            return LeaseOwner.model_validate_json(raw)
        except ValidationError:
            log.warning("lease file %s is unreadable (%r...): taking it as released", path, raw[:80])
            return LeaseOwner(
                run_id="?",
                run="unreadable lease file",
                host="?",
                pid=0,
                started_at=0.0,
                heartbeat_at=0.0,
                released_at=0.0,
                generation=generation,
                token="?",
            )

    def current(self) -> LeaseOwner | None:
        """The newest generation's record (the holder, or the last run if released); None: never taken."""
        for _ in range(5):  # a generation deleted between the listing and the read: list again
            gens = self._generations()
            if not gens:
                return None
            owner = self._read(gens[-1])
            if owner is not None:
                return owner
        return None

    def _create(self, owner: LeaseOwner) -> bool:
        """Write generation `owner.generation` only if it does not exist yet; False when another run has it."""
        path, data = self._path(owner.generation), owner.model_dump_json(indent=1).encode()
        if self.storage.is_local:
            os.makedirs(self.folder, exist_ok=True)
            tmp = f"{path}.tmp-{owner.token}"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, path)  # atomic, and the name appears with its whole content
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        try:
            self.storage.fs.pipe_file(path, data, mode="create")  # S3: If-None-Match: *
        except FileExistsError:
            pass  # usually another run's; but a retried put whose first try landed is refused too: read it
        except TypeError:  # a filesystem without exclusive create: write, then the read-back below decides
            if self.storage.exists(path):
                return False
            self.storage.fs.pipe_file(path, data)
        back = self._read(owner.generation)
        return back is not None and back.token == owner.token

    def _write(self, owner: LeaseOwner) -> None:
        path, text = self._path(owner.generation), owner.model_dump_json(indent=1)
        if self.storage.is_local:
            self.storage.write_text(path, text)  # temporary name + rename: readers never see half
        else:
            self.storage.fs.pipe_file(path, text.encode())

    # ---- free or held ---------------------------------------------------------------------------
    def why_free(self, owner: LeaseOwner, now: float | None = None) -> str | None:
        """Why `owner`'s lease may be taken (released, heartbeat too old, process gone); None while it lives."""
        now = time.time() if now is None else now
        if owner.released_at is not None:
            return "released"
        age = now - owner.heartbeat_at
        if age > self.timeout_s:
            return f"its last heartbeat is {age:.0f} s old (timeout {self.timeout_s:.0f} s)"
        if (
            owner.host == socket.gethostname()
            and owner.pid_namespace == _pid_namespace()
            and not _process_alive(owner.pid, owner.process_started)
        ):
            return f"its process {owner.pid} on this host is gone"
        return None

    def _refusal(self, owner: LeaseOwner) -> str:
        return (
            f"{self.label} is being trained by another run: {owner.describe()}; lease {self._path(owner.generation)}. "
            "Two runs writing one model overwrite each other's checkpoints, so this run stops before any work. "
            "Wait for that run to end, or stop it: its lease is released when it ends, and the lease of a run "
            f"that was killed is taken over once its heartbeat is {self.timeout_s:.0f} s old (ART_LEASE_TIMEOUT), "
            "at once on the same host. Or train under another model name. To take the lease over anyway, set "
            "ART_LEASE_TAKEOVER=1 for this one run (the other run then stops before its next step). Evaluation "
            "and deploy take no lease: LocalBackend(read_only=True) serves the model without one."
        )

    # ---- acquire, heartbeat, release --------------------------------------------------------------
    def acquire(self) -> "ModelLease":
        """Take the lease, or raise LeaseHeld naming the live holder. Starts the heartbeat thread."""
        if self.owner is not None:
            self.refs += 1
            return self
        for _ in range(10):  # each pass: read the newest generation, then try to create the next one
            held = self.current()
            if held is not None and held.run_id != self.run_id:
                reason = self.why_free(held)
                if reason is None and not self.takeover:
                    raise LeaseHeld(self._refusal(held))
                if reason != "released":
                    log.warning(
                        "taking over the lease on %s from %s: %s",
                        self.label,
                        held.describe(),
                        reason or "ART_LEASE_TAKEOVER / takeover=True was given",
                    )
            elif held is not None and held.released_at is None:
                log.info("lease on %s: run %s takes its own lease back from pid %d", self.label, self.run_id, held.pid)
            now = time.time()
            mine = LeaseOwner(
                run_id=self.run_id,
                run=self.run,
                host=socket.gethostname(),
                pid=os.getpid(),
                pid_namespace=_pid_namespace(),
                process_started=_process_started(os.getpid()),
                started_at=now,
                heartbeat_at=now,
                generation=(held.generation if held else 0) + 1,
                token=uuid.uuid4().hex,
            )
            if self._create(mine):
                self.owner, self.lost, self.refs = mine, None, 1
                self._drop_older(mine.generation)
                self._start_heartbeat()
                return self
            # another run created that generation first: read it, and be refused (or go on) like any other
        raise LeaseHeld(f"could not take the lease on {self.label} ({self.folder}): it changed hands 10 times")

    def _drop_older(self, generation: int) -> None:
        for gen in self._generations():
            if gen < generation:
                with contextlib.suppress(FileNotFoundError):
                    self.storage.fs.rm(self._path(gen))

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lease-heartbeat {self.label}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.heartbeat()
            except LeaseLost as e:
                log.error("%s", e)
                return
            except Exception as e:  # storage unreachable: try again next time; the timeout decides for others
                log.warning("lease heartbeat for %s failed (%s: %s); trying again", self.label, type(e).__name__, e)

    def _verify(self) -> None:
        """Raise LeaseLost unless the newest generation is still ours."""
        assert self.owner is not None
        now = self.current()
        if now is None or now.token != self.owner.token:
            self.lost = (
                f"the lease on {self.label} was taken over by "
                + (now.describe() if now is not None else "nobody (its file is gone)")
                + f"; this run ({self.run_id}) must stop writing the model"
            )
            raise LeaseLost(self.lost)

    def heartbeat(self) -> None:
        """Refresh our heartbeat (the thread calls this); raises LeaseLost if another run holds the lease now."""
        with self._io:
            if self.owner is None or self.lost:
                return
            self._verify()
            self.owner = self.owner.model_copy(update={"heartbeat_at": time.time()})
            self._write(self.owner)

    def check(self) -> None:
        """Raise LeaseLost when the lease is no longer ours. Call it before writing the model (each step).

        Storage that cannot be reached is not a loss: the heartbeat thread keeps watching."""
        if self.lost:
            raise LeaseLost(self.lost)
        if self.owner is None:
            raise LeaseLost(f"the lease on {self.label} is not held by this run ({self.run_id})")
        try:
            with self._io:
                self._verify()
        except LeaseLost:
            raise
        except Exception as e:
            log.warning("could not check the lease on %s (%s: %s)", self.label, type(e).__name__, e)

    def release(self, force: bool = False) -> None:
        """Count one holder down; the last one (or `force`) stops the heartbeat and marks the lease released."""
        if self.owner is None:
            return
        self.refs -= 1
        if self.refs > 0 and not force:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        with self._io:
            owner, self.owner, self.refs = self.owner, None, 0
            _forget(self)
            if self.lost:
                return  # another run holds it now: its file is not ours to touch
            try:
                held = self.current()
                if held is not None and held.token == owner.token:
                    self._write(owner.model_copy(update={"released_at": time.time()}))
            except Exception as e:  # the timeout frees it for the next run anyway
                log.warning("could not release the lease on %s (%s: %s)", self.label, type(e).__name__, e)

    def __enter__(self) -> "ModelLease":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# Leases this process holds, by folder: re-entrance by run id, and release at exit.
_HELD: dict[str, ModelLease] = {}
_HELD_LOCK = threading.Lock()


def _forget(lease: ModelLease) -> None:
    with _HELD_LOCK:
        if _HELD.get(lease.folder) is lease:
            del _HELD[lease.folder]


def acquire_model_lease(
    store: "ModelStore",
    *,
    run_id: str,
    run: str = "",
    timeout_s: float | None = None,
    takeover: bool | None = None,
) -> ModelLease:
    """Take the lease on `store`'s model for run `run_id`, before any work; raises LeaseHeld naming the holder.

    Taking it again in this process under the same run id returns the same lease, counted (release() once
    per acquire). `timeout_s`: default ART_LEASE_TIMEOUT (180 s). `takeover`: default ART_LEASE_TAKEOVER.

    >>> lease = acquire_model_lease(ModelStore("/tmp/art", "demo", "agent"), run_id="r1")   # doctest: +SKIP
    >>> lease.release()                                                                       # doctest: +SKIP
    """
    folder = store.lease_dir
    with _HELD_LOCK:
        held = _HELD.get(folder)
        if held is not None and held.run_id == run_id and held.owner is not None:
            return held.acquire()  # re-entrance: counted
    lease = ModelLease(
        store.storage,
        folder,
        run_id=run_id,
        run=run,
        label=f"{store.project}/{store.name}",
        timeout_s=timeout_s,
        takeover=takeover,
    ).acquire()
    with _HELD_LOCK:
        _HELD[folder] = lease
    return lease


@contextlib.contextmanager
def model_lease(
    store: "ModelStore", *, run_id: str, run: str = "", **options: float | bool | None
) -> Iterator[ModelLease]:
    """`with model_lease(store, run_id=...) as lease:` the lease for the block's duration, released on errors too."""
    lease = acquire_model_lease(store, run_id=run_id, run=run, **options)  # type: ignore[arg-type]
    try:
        yield lease
    finally:
        lease.release()


@atexit.register
def _release_all() -> None:
    """A process that ends normally hands its leases back (a killed one is freed by its timeout or pid)."""
    for lease in list(_HELD.values()):
        with contextlib.suppress(Exception):
            lease.release(force=True)


def read_lease(store: "ModelStore") -> LeaseOwner | None:
    """Who holds (or last held) `store`'s model lease, without taking it: e.g. for a status page."""
    return ModelLease(store.storage, store.lease_dir, run_id="reader").current()


__all__ = [
    "LeaseHeld",
    "LeaseLost",
    "LeaseOwner",
    "ModelLease",
    "acquire_model_lease",
    "model_lease",
    "read_lease",
]
