"""A flow run's temporary Prefect server dies with the flow's process, SIGKILL included.

With PREFECT_API_URL unset, Prefect 3.7 starts a temporary API server the first time a flow run needs
an API (`prefect.server.api.server.SubprocessASGIServer`: uvicorn in a child process, stopped by an
`atexit` hook). A process killed with SIGKILL runs no `atexit`, so that server lives on. Each flow calls
`guard_temporary_server()` first thing; it hands the server's process id to this process's watchdog
(`art_core.processes`), which ends it within a few seconds of our death.

    @flow
    def train(config: RunConfig) -> TrainSummary:
        guard_temporary_server()
        ...

A flow pointed at a long-lived server (PREFECT_API_URL set, as every worker is) has no temporary
server and this does nothing: that server outlives runs by design.

The end of a flow run, too: Prefect's flow run heartbeat thread (3.7, `flow_engine._send_heartbeats`)
sleeps in 1-second slices and a synchronous flow joins it on exit, so every flow run ended 0 to 1 s
(0.5 s on average) after its last line: half of a fully cached train run's time (bench/pipeline.py).
Importing this module makes flow runs leave that thread to stop by itself, as Prefect's async engine
does (`join_on_exit=False`): it is told to stop before the run ends, sends no heartbeat after that,
and is a daemon thread. Heartbeats during the run are sent exactly as before.

And the start of the next one: a Prefect server records task runs from the events runs send, by default
one SQLite transaction per event. A flow run created while those writes land (the run before it just
ended) is often refused with "database is locked" (HTTP 503), and Prefect's client tries again 2 s later:
in bench/pipeline.py, 5 of 6 fully cached re-runs started right after another run took 2.3 s instead of
0.3 s. `batched_task_run_recorder()`, called when this module is imported, makes the servers this
process starts (a temporary server, prefect_test_harness) record task runs in batches, once a second:
no re-run in 10 waited. A value set in the environment or the Prefect profile wins. A long-lived server
(`prefect server start`) is started with the same two variables (README, deployments/README.md).

And the model it trains: `training_lease(store)` holds the model's lease (art_core.lease) for the flow run,
so a second run training the same project/model is refused before any work and names the run that holds it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from typing import TYPE_CHECKING, ContextManager

from art_core.processes import guard

if TYPE_CHECKING:
    from art_core.lease import ModelLease
    from art_core.store import ModelStore


def training_lease(store: "ModelStore") -> ContextManager["ModelLease"]:
    """The model's lease (art_core.lease) for this flow run: a second run training the same model is refused.

    Example: `with training_lease(ref.store()) as lease:` around a training flow's body, first thing; call
    `lease.check()` before each step. Keyed by the flow run's id, so a retried flow run takes its own lease back.
    """
    from prefect.runtime import flow_run

    from art_core.lease import model_lease

    run_id = flow_run.get_id() or f"process-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return model_lease(
        store, run_id=str(run_id), run=f"Prefect flow run {flow_run.get_flow_name()}/{flow_run.get_name()}"
    )


def guard_temporary_server() -> list[int]:
    """Guard the temporary Prefect API server(s) this process started; return their process ids.

    Example: `guard_temporary_server()` at the top of a flow body; `[]` when PREFECT_API_URL is set.
    Only the server's own process is guarded, never its process group: it shares ours (and perhaps a
    shell's job) since Prefect does not give it a session of its own.
    """
    # Prefect imports this module when it starts a temporary server; not imported means none to guard
    # (and importing the server's app here would cost seconds to a worker that talks to a real server).
    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return []
    pids = []
    for server in list(module.SubprocessASGIServer._instances.values()):
        process = server.server_process
        if process is not None and process.poll() is None:
            guard(process.pid)
            pids.append(process.pid)
    return pids


def _unjoined_heartbeats() -> None:
    """Make Prefect's synchronous flow runs end without waiting for the heartbeat thread's 1-second sleep."""
    import prefect.flow_engine as engine

    send = getattr(engine, "_send_heartbeats", None)
    if send is None or getattr(send, "unjoined", False):
        return  # another Prefect version (nothing to shorten), or done already

    @contextlib.contextmanager
    def send_heartbeats(run_engine, join_on_exit: bool = True):
        with send(run_engine, join_on_exit=False):
            yield

    send_heartbeats.unjoined = True
    engine._send_heartbeats = send_heartbeats


# What a server started from this process (or by hand, with these exported) records task runs with: up to
# 100 events in one transaction, at least once a second (a task run shows in the UI within a second).
TASK_RUN_RECORDER = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",  # whole seconds: Prefect rounds it down
}


def batched_task_run_recorder() -> dict[str, str]:
    """Set TASK_RUN_RECORDER in this process's environment where not set already; return what applies.

    A Prefect server started from this process afterwards inherits them (a temporary server passes on
    os.environ, and the profile's own settings on top)."""
    for name, value in TASK_RUN_RECORDER.items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in TASK_RUN_RECORDER}


_unjoined_heartbeats()
batched_task_run_recorder()
