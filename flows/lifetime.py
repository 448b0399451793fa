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
"""

from __future__ import annotations

import sys

from art_core.processes import guard


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
