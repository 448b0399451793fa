"""Processes a parent hands to its watchdog die with it, SIGKILL included; released ones are left alone.

Each test runs a parent Python process (a few lines below) that starts plain `sleep` processes, guards
them with art_core.processes and prints their ids; the test then SIGKILLs the parent and watches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from art_core.processes import group_members

PARENT = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    from art_core.processes import guard, release, watchdog_pid, parent_death_preexec
    mode = sys.argv[1]
    out = {}
    if mode in ("kill", "fork"):
        # a server-like group: a leader with two children, in a session of its own
        group = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"], start_new_session=True)
        # a child that ignores SIGTERM: only the SIGKILL after the grace period ends it
        stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 600"])
        guard(group.pid, group=True)
        guard(stubborn.pid)
        out.update(group=group.pid, stubborn=stubborn.pid)
        if mode == "fork" and os.fork() == 0:  # a forked child keeps the watchdog's pipe open after we die
            time.sleep(600)
            os._exit(0)
    if mode == "restart":  # someone killed our watchdog: the next guard starts another one
        first = subprocess.Popen(["sleep", "600"])
        guard(first.pid)
        os.kill(watchdog_pid(), signal.SIGKILL)
        time.sleep(0.2)
        again = subprocess.Popen(["sleep", "600"])
        guard(again.pid)
        out.update(first=first.pid, again=again.pid)
    if mode == "release":
        kept = subprocess.Popen(["sleep", "600"], start_new_session=True)
        guard(kept.pid, group=True)
        release(kept.pid)
        out.update(kept=kept.pid)
    if mode == "pdeathsig":
        child = subprocess.Popen(["sleep", "600"], preexec_fn=parent_death_preexec(signal.SIGTERM))
        out.update(child=child.pid)
    if mode == "exit":
        done = subprocess.Popen(["sleep", "600"])
        guard(done.pid)
        done.terminate(); done.wait()
        release(done.pid)
    out.update(watchdog=watchdog_pid())
    print(json.dumps(out), flush=True)
    if mode != "exit":
        time.sleep(600)
    """
)


def _start_parent(mode: str) -> tuple[subprocess.Popen, dict]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line, f"the parent died before reporting its children (exit code {parent.wait()})"
    return parent, json.loads(line)


def _running(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, not yet reaped by its new parent) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], groups: list[int], timeout: float) -> list[int]:
    """Wait until none of `pids` and no member of `groups` runs; return what still runs after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _running(p)] + [m for g in groups for m in group_members(g)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _cleanup(pids: list[int], groups: list[int], parent: subprocess.Popen | None = None) -> None:
    """Only when a test failed: leave no parent or sleeper behind (by id, never by name)."""
    if parent is not None and parent.poll() is None:
        parent.kill()
        parent.wait()
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in pids:
        if _running(p):
            os.kill(p, signal.SIGKILL)


def test_sigkill_of_the_parent_ends_guarded_groups_and_processes_within_5s():
    parent, ids = _start_parent("kill")
    pids, groups = [ids["stubborn"], ids["watchdog"]], [ids["group"]]
    try:
        deadline = time.monotonic() + 5  # the leader and its two sleepers (sh may not have forked them yet)
        while len(group_members(ids["group"])) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group_members(ids["group"])) == 3
        time.sleep(0.5)
        assert all(_running(p) for p in pids)  # a live parent: its watchdog touches nothing
        t0 = time.monotonic()
        parent.kill()
        parent.wait()
        assert _wait_gone(pids, groups, timeout=5.0) == []  # the stubborn one needed the SIGKILL
        assert time.monotonic() - t0 < 5.0
    finally:
        _cleanup(pids, groups, parent)


def test_a_forked_child_holding_the_pipe_does_not_keep_the_watchdog_waiting():
    parent, ids = _start_parent("fork")
    pids, groups = [ids["stubborn"], ids["watchdog"]], [ids["group"]]
    forked = [p for p in _children(parent.pid) if p not in (ids["stubborn"], ids["group"], ids["watchdog"])]
    assert len(forked) == 1
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone(pids, groups, timeout=5.0) == []
        assert _running(forked[0])  # not ours to end: it was never guarded
    finally:
        _cleanup(pids + forked, groups, parent)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_released_processes_survive_the_parent():
    parent, ids = _start_parent("release")
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone([ids["watchdog"]], [], timeout=5.0) == []  # the watchdog ran and exited
        assert group_members(ids["kept"]) == [ids["kept"]]
    finally:
        _cleanup([], [ids["kept"]], parent)


def test_a_clean_exit_leaves_no_watchdog_behind():
    parent, ids = _start_parent("exit")
    assert parent.wait(timeout=30) == 0
    assert _wait_gone([ids["watchdog"]], [], timeout=5.0) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_parent_death_signal_ends_an_unguarded_child():
    parent, ids = _start_parent("pdeathsig")
    try:
        assert ids["watchdog"] is None  # nothing was guarded: this is the kernel's doing alone
        parent.kill()
        parent.wait()
        assert _wait_gone([ids["child"]], [], timeout=5.0) == []
    finally:
        _cleanup([ids["child"]], [], parent)


def test_sigint_to_the_parents_group_does_not_stop_the_watchdog():
    """Ctrl-C reaches the whole foreground group; the watchdog must stay to guard what is left."""
    parent, ids = _start_parent("kill")
    pids, groups = [ids["stubborn"], ids["watchdog"]], [ids["group"]]
    try:
        os.kill(ids["watchdog"], signal.SIGINT)
        time.sleep(0.3)
        assert _running(ids["watchdog"])
        parent.kill()
        parent.wait()
        assert _wait_gone(pids, groups, timeout=5.0) == []
    finally:
        _cleanup(pids, groups, parent)


def test_a_killed_watchdog_is_replaced_by_the_next_guard():
    parent, ids = _start_parent("restart")
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone([ids["again"], ids["watchdog"]], [], timeout=5.0) == []
        assert _running(ids["first"])  # registered with the killed watchdog only: unguarded, as documented
    finally:
        _cleanup([ids["first"], ids["again"]], [], parent)
