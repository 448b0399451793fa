"""A server of ours that dies mid-gather is named (model, address, pid, signal, log), not hidden behind
`APIConnectionError: Connection error.`; a connection error to a server we did not start stays a rollout failure.

A stand-in server (a few lines of http.server: /health answers, a chat request hangs like a long generation)
stands for vLLM, so the test takes a second; tests/pipeline/test_faults.py kills a real vLLM server mid-run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import pytest

from art_core.gather import TooManyExceptions, gather_trajectories, gather_trajectory_groups
from art_core.inference.server import ServerConfig, ServerDied, VLLMServer, openai_client
from art_core.trajectories import Trajectory

HANGING_VLLM = """
import http.server, sys, time
print("stand-in vLLM: serving; the next request hangs", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def do_POST(self):
        time.sleep(600)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class _HangingServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", HANGING_VLLM, str(self.port)]


async def _ask(base_url: str) -> Trajectory:
    client = openai_client(base_url, "key")
    try:
        await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()
    return Trajectory(reward=1.0)


async def _kill_soon(pid: int, sig: int = signal.SIGKILL) -> None:
    await asyncio.sleep(0.5)  # the requests are in flight by then
    os.kill(pid, sig)


@pytest.fixture
def hanging_server(tmp_path):
    server = _HangingServer(ServerConfig(model="/models/tiny", log_path=str(tmp_path / "server.log"))).start()
    yield server
    server.stop()


async def test_a_server_killed_mid_gather_is_named_with_its_pid_signal_and_log(hanging_server):
    pid = hanging_server.pid
    killer = asyncio.ensure_future(_kill_soon(pid))
    with pytest.raises(ServerDied) as info:
        # Even with every failure tolerated: a dead server fails every later rollout, so the gather ends.
        await gather_trajectory_groups(
            [[_ask(hanging_server.base_url) for _ in range(3)]], max_exceptions=1.0, pbar_desc="gather"
        )
    await killer
    message = str(info.value)
    assert f"the vLLM server for /models/tiny ({hanging_server.base_url}, pid {pid})" in message
    assert "died with exit code -9 (killed by SIGKILL, signal 9) during 'gather'" in message
    assert f"Last lines of {hanging_server.log_path}" in message and "stand-in vLLM: serving" in message
    assert info.value.pid == pid and info.value.returncode == -9
    assert type(info.value.__cause__).__name__ == "APIConnectionError"  # what the rollout saw


async def test_an_evaluation_names_a_server_that_exited_too(hanging_server):
    killer = asyncio.ensure_future(_kill_soon(hanging_server.pid, signal.SIGTERM))
    with pytest.raises(ServerDied, match=r"killed by SIGTERM, signal 15\) during 'eval val'"):
        await gather_trajectories([_ask(hanging_server.base_url) for _ in range(2)], pbar_desc="eval val")
    await killer


async def test_a_connection_error_to_a_server_we_did_not_start_stays_a_rollout_failure():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TooManyExceptions, match="first failure: APIConnectionError"):
        await gather_trajectory_groups([[_ask(f"http://127.0.0.1:{port}/v1")]], pbar_desc=None)
