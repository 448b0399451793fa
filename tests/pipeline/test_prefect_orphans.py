"""The temporary Prefect server a flow run starts (PREFECT_API_URL unset) dies with the flow's process.

A subprocess runs a trivial flow that calls `guard_temporary_server()` first, as every flow of ours does,
and is killed with SIGKILL in the middle of the flow. Prefect stops that server only from `atexit`,
which a SIGKILL skips; the watchdog must end it within 5 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

FLOW = """
import json, time
from prefect import flow
from prefect.client.orchestration import get_client
from art_pipeline.flows.lifetime import guard_temporary_server

@flow
def trivial() -> None:
    guarded = guard_temporary_server()
    with get_client(sync_client=True) as client:  # what the temporary server itself runs with
        recorder = client._client.get("/admin/settings").json()["server"]["services"]["task_run_recorder"]
    print(json.dumps({"guarded": guarded, "recorder": recorder}), flush=True)
    time.sleep(600)  # killed here, mid-flow

if __name__ == "__main__":
    trivial()
"""


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigkill_mid_flow_ends_the_temporary_prefect_server(tmp_path):
    # Nothing of the test process's Prefect settings: its API and the task-run recorder's batching (the flow's
    # own import of flows.lifetime must give its temporary server those).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_", "PREFECT_SERVER_SERVICES_"))}
    # A database of its own: never the developer's ~/.prefect, which other runs may be using.
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    # Prefect waits 20 s for its temporary server; a loaded 2-core CI machine took longer once.
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    flow = subprocess.Popen([sys.executable, "-c", FLOW], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    tree: list[psutil.Process] = []
    try:
        line = ""
        while line[:1] != "{":  # Prefect may print its own lines to stdout first
            line = flow.stdout.readline()
            assert line, f"the flow exited before it started (exit code {flow.wait()})"
        started = json.loads(line)
        guarded = started["guarded"]
        # Task runs recorded in batches, once a second: a run started right after another is not refused
        # by the server's SQLite and made to wait 2 s (flows/lifetime.py).
        assert (started["recorder"]["batch_size"], started["recorder"]["flush_interval"]) == (100, 1), started
        tree = psutil.Process(flow.pid).children(recursive=True)
        servers = [p for p in tree if "prefect.server.api.server:create_app" in " ".join(p.cmdline())]
        assert [p.pid for p in servers] == guarded and len(guarded) == 1  # the temporary server, guarded

        t0 = time.monotonic()
        flow.send_signal(signal.SIGKILL)
        flow.wait()
        while any(_running(p) for p in tree) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        left = [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in tree if _running(p)]
        assert left == [], f"outlived the flow's process by 5 s: {left}"
    finally:
        if flow.poll() is None:
            flow.kill()
            flow.wait()
        for p in tree:  # only when the test failed: leave no server behind (by id)
            if _running(p):
                p.kill()


def test_no_temporary_server_means_nothing_to_guard():
    """A process that never started a temporary server (a worker talking to its server) guards nothing."""
    code = (
        "import sys; from art_pipeline.flows.lifetime import guard_temporary_server\n"
        "print(guard_temporary_server(), 'prefect.server.api.server' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False"  # and it did not load Prefect's server app to find that out


def test_a_flow_run_ends_without_waiting_out_the_heartbeat_threads_sleep():
    """Prefect's heartbeat thread sleeps in 1-second slices and a synchronous flow run joined it on exit, so
    every run ended up to 1 s late (half of a fully cached train run). Heartbeats are still sent."""
    import logging
    import threading

    import prefect.flow_engine as engine

    import art_pipeline.flows.lifetime  # noqa: F401  (every flow module imports it, before any run starts)

    sent = threading.Event()

    class Run:
        """The parts of a flow run engine the heartbeat context uses."""

        heartbeat_seconds, flow_run, logger = 30, None, logging.getLogger("test")

        def _build_heartbeat_event_template(self):
            return {}, []

        def _emit_flow_run_heartbeat(self, resource, related):
            sent.set()

    threads = set(threading.enumerate())
    context = engine._send_heartbeats(Run())
    context.__enter__()
    assert sent.wait(10), "no heartbeat was sent at the start of the run"
    (heartbeat,) = set(threading.enumerate()) - threads
    t0 = time.perf_counter()
    context.__exit__(None, None, None)  # the thread is in its first 1-second sleep now
    assert time.perf_counter() - t0 < 0.3
    heartbeat.join(timeout=5)
    assert not heartbeat.is_alive()  # it stops by itself within its sleep, sending nothing more


def test_a_task_run_recorder_setting_of_the_users_own_wins(monkeypatch):
    from art_pipeline.flows.lifetime import TASK_RUN_RECORDER, batched_task_run_recorder

    batch, flush = TASK_RUN_RECORDER
    monkeypatch.setenv(batch, "7")
    monkeypatch.delenv(flush, raising=False)
    assert batched_task_run_recorder() == {batch: "7", flush: "1"}
    assert os.environ[flush] == "1"
