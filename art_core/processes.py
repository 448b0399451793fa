"""Processes we start die with us, SIGKILL included: a per-process watchdog that ends what we registered.

A process that is killed with SIGKILL runs no `atexit`, no `finally` and no signal handler, so the
servers it started (vLLM with its engine and worker children, a temporary Prefect server) live on.
`guard(pid)` hands such a process to a small watchdog: a second Python process, started on first use,
that holds the read end of a pipe from us. When the pipe closes or we are no longer its parent (we
died, however), it sends SIGTERM to everything still registered, then SIGKILL after a short grace.

    >>> proc = subprocess.Popen(["sleep", "600"], start_new_session=True)        # doctest: +SKIP
    >>> guard(proc.pid, group=True)     # its whole process group ends if we die   # doctest: +SKIP
    >>> # normal work; on a normal stop:
    >>> proc.terminate(); proc.wait()                                              # doctest: +SKIP
    -15
    >>> release(proc.pid)               # nothing left to guard                    # doctest: +SKIP

(Not run with the docstring tests: the watchdog it starts would outlive the example; tests/test_processes.py
runs it.)

The watchdog runs in a session of its own and ignores SIGINT, so Ctrl-C or a signal to our process
group leaves it to do its work after we are gone (a clean shutdown has stopped everything by then).
SIGTERM sent to the watchdog itself ends what it guards, then the watchdog. It remembers each process's
start time and never signals a process id that was reused by another program.

A second line, for children started from the main thread: `parent_death_preexec(signal.SIGTERM)` is a
`preexec_fn` that asks Linux to signal the child when we die (PR_SET_PDEATHSIG). Linux ties that signal
to the *thread* that forked, not the process, so it must not be used from worker threads (a Prefect
task's thread ends long before the process does).

Only the standard library is used: the watchdog runs this file by its path, without importing art_core.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

GRACE_S = 2.0  # SIGTERM -> SIGKILL; vLLM's API server and engine core both exit well within it on SIGTERM
POLL_S = 0.25  # how often the watchdog checks that its parent lives (a forked child may hold the pipe open)


class _Client:
    """Our end of the watchdog: the child process and the pipe we write registrations to."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        # -I -S: no environment, no site-packages; the watchdog needs the standard library only.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), "--watch", str(self.owner), str(GRACE_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.lock = threading.Lock()
        # Wait until it ignores SIGINT and handles SIGTERM: a signal in its first milliseconds must not kill it.
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the process watchdog failed to start (exit code {self.proc.wait()})")
        self.proc.stdout.close()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with self.lock:  # one write per line (< PIPE_BUF, atomic), in order across threads
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()


_CLIENT: _Client | None = None
_CLIENT_LOCK = threading.Lock()


def _client(replace: bool = False) -> _Client:
    """This process's watchdog, started on first use (again in a forked child: it must watch the child)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if replace or _CLIENT is None or _CLIENT.owner != os.getpid() or _CLIENT.proc.poll() is not None:
            _CLIENT = _Client()
        return _CLIENT


def guard(pid: int, *, group: bool = False) -> None:
    """End process `pid` (with `group=True`: the process group it leads) when this process dies.

    Example: `guard(server.pid, group=True)` right after starting a server with start_new_session=True.
    """
    line = f"{'group' if group else 'pid'} {int(pid)}"
    try:
        _client().send(line)
    except BrokenPipeError:  # the watchdog was killed (what it guarded is unguarded now): start another
        _client(replace=True).send(line)


def release(pid: int) -> None:
    """Stop guarding `pid` (call it after stopping the process yourself). Unknown ids are ignored.

    Example: `server.terminate(); server.wait(); release(server.pid)`.
    """
    client = _CLIENT
    if client is not None and client.owner == os.getpid() and client.proc.poll() is None:
        try:
            client.send(f"forget {int(pid)}")
        except BrokenPipeError:  # the watchdog is gone: it guards nothing any more
            pass


def watchdog_pid() -> int | None:
    """The process id of this process's watchdog, or None before the first `guard` (for tests and logs)."""
    client = _CLIENT
    return client.proc.pid if client is not None and client.owner == os.getpid() else None


def parent_death_preexec(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that makes Linux send `sig` to the child when its parent thread dies; None elsewhere.

    Example: `subprocess.Popen(argv, preexec_fn=parent_death_preexec())` from the main thread only (Linux
    sends the signal when the forking *thread* exits).
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the forked child must not load anything
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:  # the parent died before prctl: nobody will send the signal now
            os.kill(os.getpid(), sig)

    return set_death_signal


# ---- the watchdog process ------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), which tells a reused id apart; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _group_stats(pgid: int) -> list[tuple[int, list[str]]]:
    """(pid, the /proc/PID/stat fields after the command name) of each live member of group `pgid` (Linux)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append((int(entry), fields))
    return members


def group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that still run (zombies do not count: they only wait to be reaped).

    Example: `while group_members(server.pid): time.sleep(0.1)` waits for a server's engine children too.
    """
    if not os.path.isdir("/proc"):  # not Linux: no list of members, only whether the group still exists
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except OSError:
            return []
    return [pid for pid, _ in _group_stats(pgid)]


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system) the live members of group `pgid` have used so far; None without /proc.

    A sign of work that needs nothing from the processes themselves: a vLLM server's engine busy on one long
    step moves it, while its /metrics still shows the last step's counts. Members that ended take their time
    with them, so the sum can fall; compare readings with `>` for "worked since".
    """
    if not os.path.isdir("/proc"):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[11]) + int(fields[12]) for _, fields in _group_stats(pgid)) / ticks


def _alive(pid: int, group: bool, started: str | None) -> bool:
    if group:
        return bool(group_members(pid))
    now = _start_time(pid)
    return now is not None and now == started and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _signal(pid: int, group: bool, started: str | None, sig: int) -> None:
    now = _start_time(pid)
    if now is not None and started is not None and now != started:
        return  # the id belongs to another program now (its group cannot be ours: ids in use are not reused)
    try:
        if group:
            os.killpg(pid, sig)
        elif now is not None or not os.path.isdir("/proc"):
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_all(guarded: dict[int, tuple[bool, str | None]], grace_s: float) -> None:
    """SIGTERM everything still guarded, wait up to `grace_s` for it to exit, SIGKILL what is left.

    After a clean shutdown nothing is left to guard (each stop released its process) and this does nothing.
    """
    for pid, (group, started) in guarded.items():
        _signal(pid, group, started, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p, g, s) for p, (g, s) in guarded.items()):
        time.sleep(0.05)
    for pid, (group, started) in guarded.items():
        _signal(pid, group, started, signal.SIGKILL)
    if guarded:
        print(
            f"art_core watchdog: parent gone; ended {sorted(guarded)} (groups and processes)",
            file=sys.stderr,
            flush=True,
        )


def _watch(parent: int, grace_s: float) -> None:
    """The watchdog's loop: read registrations until the pipe closes or the parent is gone, then end them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    os.write(1, b"ready\n")
    os.close(1)
    guarded: dict[int, tuple[bool, str | None]] = {}
    buffer = b""

    def handle(data: bytes) -> None:
        nonlocal buffer
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            verb, pid = line.decode().split()
            if verb == "forget":
                guarded.pop(int(pid), None)
            else:
                guarded[int(pid)] = (verb == "group", _start_time(int(pid)))

    while not stop:
        try:
            ready, _, _ = select.select([0], [], [], POLL_S)
        except InterruptedError:
            continue
        if ready:
            data = os.read(0, 65536)
            if not data:
                break  # every write end is closed: the parent exited
            handle(data)
        elif os.getppid() != parent:
            # The parent died but a forked child of it still holds the pipe: drain what was sent, then act.
            while select.select([0], [], [], 0)[0] and (data := os.read(0, 65536)):
                handle(data)
            break
    _end_all(guarded, grace_s)


if __name__ == "__main__" and sys.argv[1:2] == ["--watch"]:
    _watch(int(sys.argv[2]), float(sys.argv[3]))
