"""One writer per model (art_core.lease), on a local folder and on S3 (moto on loopback).

The running run is a real second process holding the lease; a crashed one is that process SIGKILLed, or a
lease file whose heartbeat stopped on another host. The library door (LocalBackend) is refused before any
server starts; the Prefect door's test is tests/pipeline/test_one_writer.py.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from art_core.lease import LeaseHeld, LeaseLost, LeaseOwner, ModelLease, acquire_model_lease, model_lease, read_lease
from art_core.store import ModelStore

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOLDER = """
import sys, time
from art_core.lease import acquire_model_lease
from art_core.store import ModelStore

lease = acquire_model_lease(ModelStore(sys.argv[1], "demo", "agent"), run_id="run-a", run="the holder script")
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> str:
    """A storage root: a local folder, or s3:// on a moto server (tests/conftest.py's moto_s3)."""
    if request.param == "local":
        return str(tmp_path / "art")
    # moto keeps its buckets per process, not per server: a prefix of its own keeps tests apart
    return f"{request.getfixturevalue('moto_s3')}/{uuid.uuid4().hex[:8]}"


@pytest.fixture
def holder(root):
    """Another process holding demo/agent's lease as run-a; yields its Popen (stopped by its pid at the end)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "held", proc.stderr.read() if proc.poll() is not None else line
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def _write_owner(store: ModelStore, **fields) -> None:
    """A lease file as another host's run left it."""
    now = time.time()
    owner = LeaseOwner(
        **{
            "run_id": "run-elsewhere",
            "run": "a run on another machine",
            "host": "gpu-box-7",
            "pid": 4242,
            "started_at": now - 3600,
            "heartbeat_at": now,
            "generation": 3,
            "token": "t",
            **fields,
        }
    )
    path = store.storage.join(store.lease_dir, f"{owner.generation:08d}.json")
    if store.storage.is_local:
        os.makedirs(store.lease_dir, exist_ok=True)
    store.storage.write_text(path, owner.model_dump_json())


def test_a_second_run_is_refused_naming_the_running_one(root, holder):
    store = ModelStore(root, "demo", "agent")
    with pytest.raises(LeaseHeld) as e:
        acquire_model_lease(store, run_id="run-b")
    message = str(e.value)
    for part in ("demo/agent", "run-a", "the holder script", socket.gethostname(), f"pid {holder.pid}"):
        assert part in message
    assert "started 20" in message and "last heartbeat" in message
    assert "ART_LEASE_TAKEOVER=1" in message and "Wait for that run" in message
    assert read_lease(store).run_id == "run-a"  # the refused run wrote nothing


def test_a_sigkilled_runs_lease_is_taken_over_at_once_on_its_host(root, holder, caplog):
    store = ModelStore(root, "demo", "agent")
    os.kill(holder.pid, signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline:  # not reaped: a zombie, which still has its process id
        with open(f"/proc/{holder.pid}/stat") as f:
            if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                break
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="art_core.lease"):
        lease = acquire_model_lease(store, run_id="run-b")
    try:
        assert f"its process {holder.pid} on this host is gone" in caplog.text and "run-a" in caplog.text
        assert read_lease(store).run_id == "run-b" and read_lease(store).generation == 2
    finally:
        lease.release()


def test_a_stale_heartbeat_from_another_host_is_taken_over(root, caplog):
    store = ModelStore(root, "demo", "agent")
    _write_owner(store, heartbeat_at=time.time() - 30)
    with pytest.raises(LeaseHeld, match="gpu-box-7"):  # 30 s old is alive under the default 180 s timeout
        acquire_model_lease(store, run_id="run-b")
    with caplog.at_level(logging.WARNING, logger="art_core.lease"):
        lease = acquire_model_lease(store, run_id="run-b", timeout_s=20)
    try:
        assert "taking over the lease on demo/agent" in caplog.text and "gpu-box-7" in caplog.text
        assert re.search(r"its last heartbeat is \d+ s old \(timeout 20 s\)", caplog.text)
        owner = read_lease(store)
        assert owner.run_id == "run-b" and owner.generation == 4
        assert [p.rsplit("/", 1)[-1] for p in store.storage.fs.ls(store.lease_dir, detail=False)] == ["00000004.json"]
    finally:
        lease.release()


def test_release_reentrance_and_heartbeat(root, caplog):
    store = ModelStore(root, "demo", "agent")
    lease = acquire_model_lease(store, run_id="run-a", timeout_s=0.6)  # heartbeat every 0.1 s
    assert acquire_model_lease(store, run_id="run-a") is lease and lease.refs == 2  # the same run re-enters
    first = read_lease(store).heartbeat_at
    time.sleep(0.5)
    assert read_lease(store).heartbeat_at > first  # the thread keeps it alive past the timeout
    with pytest.raises(LeaseHeld):
        acquire_model_lease(store, run_id="run-b", timeout_s=0.6)
    lease.release()
    assert read_lease(store).released_at is None  # one holder left
    lease.release()
    assert read_lease(store).released_at is not None
    with caplog.at_level(logging.WARNING, logger="art_core.lease"):
        with model_lease(store, run_id="run-b") as other:
            assert read_lease(store).run_id == "run-b"
    assert "taking over" not in caplog.text  # a released lease is simply free
    assert other.owner is None and read_lease(store).released_at is not None


def test_takeover_on_request_stops_the_holder(root, monkeypatch):
    store = ModelStore(root, "demo", "agent")
    a = acquire_model_lease(store, run_id="run-a")
    monkeypatch.setenv("ART_LEASE_TAKEOVER", "1")
    b = acquire_model_lease(store, run_id="run-b")
    try:
        with pytest.raises(LeaseLost, match="run-b"):
            a.check()
        a.release()  # the loser leaves b's file alone
        assert read_lease(store).run_id == "run-b" and read_lease(store).released_at is None
        b.check()
    finally:
        b.release()


def test_two_runs_racing_for_a_free_lease_get_one_winner(root):
    store = ModelStore(root, "demo", "agent")
    leases = [
        ModelLease(store.storage, store.lease_dir, run_id=f"run-{i}", label="demo/agent", timeout_s=60)
        for i in range(4)
    ]
    start, won, refused = threading.Barrier(len(leases)), [], []

    def take(lease: ModelLease) -> None:
        start.wait()
        try:
            won.append(lease.acquire())
        except LeaseHeld:
            refused.append(lease)

    threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert len(won) == 1 and len(refused) == 3
        assert read_lease(store).token == won[0].owner.token
    finally:
        for lease in won:
            lease.release()


async def test_the_library_door_is_refused_before_any_server_starts(tmp_path, holder_local):
    from art_core.local_backend import LocalBackend
    from art_core.model import TrainableModel

    root = str(tmp_path / "art")
    backend = LocalBackend(path=root)
    model = TrainableModel(name="agent", project="demo", base_model="/models/tiny")
    with pytest.raises(LeaseHeld, match="run-a"):
        await model.register(backend)
    assert backend._pool.servers() == [], "a server was started for a run that was refused"
    assert not os.path.exists(ModelStore(root, "demo", "agent").model_json)
    await backend.close()


@pytest.fixture
def holder_local(tmp_path):
    """The holder process on tmp_path/art (for tests that are about a door, not about the storage)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "art")], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


@pytest.mark.vllm
async def test_the_library_door_holds_the_lease_until_close_and_read_only_serves_without_it(
    tmp_path, tiny_model_path, vllm_server
):
    from art_core.local_backend import LocalBackend
    from art_core.model import TrainableModel

    root = str(tmp_path / "art")

    def model() -> TrainableModel:
        return TrainableModel(name="leased", project="demo", base_model=tiny_model_path)

    training = LocalBackend(path=root, server=vllm_server)
    await model().register(training)
    assert read_lease(ModelStore(root, "demo", "leased")).run_id == training.run_id

    second = LocalBackend(path=root, server=vllm_server)
    with pytest.raises(LeaseHeld, match=training.run_id):
        await model().register(second)

    viewer = LocalBackend(path=root, server=vllm_server, read_only=True)  # evaluation: no lease
    watched = model()
    await watched.register(viewer)
    assert watched.get_inference_name() == "leased@0"
    with pytest.raises(RuntimeError, match="read_only"):
        await watched.train([])
    await viewer.close()

    await training.close()  # releases the lease: the next run goes ahead
    await model().register(second)
    assert read_lease(ModelStore(root, "demo", "leased")).run_id == second.run_id
    await second.close()
    assert read_lease(ModelStore(root, "demo", "leased")).released_at is not None
