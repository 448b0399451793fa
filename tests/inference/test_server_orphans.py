"""A vLLM server dies with the process that started it, SIGKILL included: API server, engine core, workers.

A parent Python process starts a real VLLMServer on the tiny model from a worker thread (as a Prefect
task does; Linux's parent-death signal does not apply there, so the watchdog alone must do it) and is
killed with SIGKILL. Every process of the server's tree, listed with psutil before the kill, must be
gone within 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

PARENT = """
import sys, threading, time
from art_core.inference.server import ServerConfig, VLLMServer

if __name__ == "__main__":
    server = VLLMServer(ServerConfig(model=sys.argv[1], served_model_name="tiny", log_path=sys.argv[2]))
    started = threading.Thread(target=server.start)  # a worker thread, like a Prefect task's
    started.start()
    started.join()
    print(server.pid, flush=True)
    time.sleep(600)
"""


def _running(proc: psutil.Process) -> bool:
    """Still running as the same process (a zombie, or a new process under a reused id, counts as gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
@pytest.mark.vllm
def test_sigkill_of_the_parent_ends_the_server_engine_and_workers(tiny_model_path, tmp_path):
    log = str(tmp_path / "server.log")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, tiny_model_path, log], stdout=subprocess.PIPE, text=True)
    tree: list[psutil.Process] = []
    try:
        line = parent.stdout.readline()
        assert line, f"the parent died while starting vLLM (exit code {parent.wait()}); see {log}"
        server = psutil.Process(int(line))
        tree = [server] + server.children(recursive=True)
        names = {p.name() for p in tree}
        assert "VLLM::EngineCore" in names, names  # the engine core is a child process that must die too
        assert all(os.getpgid(p.pid) == server.pid for p in tree)  # one group, which the watchdog ends

        t0 = time.monotonic()
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        while any(_running(p) for p in tree) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        left = [f"{p.pid} {p.name()}" for p in tree if _running(p)]
        assert left == [], f"outlived their parent by 5 s: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for p in tree:  # only when the test failed: leave no server behind (by id)
            if _running(p):
                p.kill()


STAND_IN = """
import http.server, subprocess, sys, threading, time
from art_core.inference.server import ServerConfig, VLLMServer

ENGINE = "import http.server, subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
ENGINE += "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"

class StandIn(VLLMServer):
    def command(self):
        return [sys.executable, "-c", ENGINE, str(self.port)]

    def _wait_healthy(self):
        time.sleep(1.0)

if __name__ == "__main__":
    server = StandIn(ServerConfig(model="/m", log_path=sys.argv[2]))
    if sys.argv[1] == "thread":
        t = threading.Thread(target=server.start)
        t.start()
        t.join()
    else:
        server.start()
    print(server.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("started_from", ["thread", "main"])
def test_sigkill_of_the_parent_ends_a_stand_in_server_and_its_child(started_from, tmp_path):
    """The same guarantee in a second, without vLLM: from a worker thread the watchdog alone does it."""
    log = str(tmp_path / "server.log")
    parent = subprocess.Popen([sys.executable, "-c", STAND_IN, started_from, log], stdout=subprocess.PIPE, text=True)
    tree: list[psutil.Process] = []
    try:
        server = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 60  # only waits as long as the child takes to appear
        while not server.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = [server] + server.children(recursive=True)
        assert len(tree) == 2
        t0 = time.monotonic()
        parent.kill()
        parent.wait()
        while any(_running(p) for p in tree) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        assert [p.pid for p in tree if _running(p)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for p in tree:
            if _running(p):
                p.kill()
