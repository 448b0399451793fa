"""A request no server is working on fails within seconds, naming the server; a slow answer that is being
worked on is not cut (issue 37).

The servers are small asyncio HTTP servers on 127.0.0.1 that this test starts, standing for vLLM: each one
answers /metrics as vLLM does (or not at all, or 404 as a hosted API) and answers a chat request late, or never.
The rollouts use our production client (`art_core.inference.server.openai_client`, with the 1200 s timeout
`model.openai_client()` gives), so without the watch the lost request would wait 20 minutes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Callable

import pytest

from art_core.gather import TooManyExceptions, gather_trajectory_groups
from art_core.inference.http_client import ServerStalled, parse_metrics
from art_core.inference.server import ServerConfig, VLLMServer, openai_client
from art_core.trajectories import Trajectory

STALL_S = 2.0
BOUND_S = 8.0  # what "fails fast" means here: the stall bound, a few polls, and a busy 2-core machine

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def vllm_metrics(running: int, waiting: int = 0, generated: int = 12) -> str:
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}.0\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}.0\n'
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {generated}.0\n'
    )


class LoopbackServer:
    """An HTTP/1.1 server on 127.0.0.1: /metrics answers `metrics` (None: never answers; a number: that status; a
    function: its text, asked anew each time), a POST is answered after `answer_after_s` seconds (None: accepted,
    read, and never answered)."""

    def __init__(self, metrics: "str | int | Callable[[], str] | None", answer_after_s: float | None) -> None:
        self.metrics, self.answer_after_s = metrics, answer_after_s
        self.posts = 0
        self.handlers: set[asyncio.Task] = set()

    async def __aenter__(self) -> "LoopbackServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.root = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for task in self.handlers:  # the connections it holds unanswered
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.add(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
                await reader.readexactly(length)
                if path == "/metrics":
                    if self.metrics is None:
                        await asyncio.sleep(3600)
                    text = self.metrics() if callable(self.metrics) else self.metrics
                    status, body = (text, b"") if isinstance(text, int) else (200, text.encode())
                else:
                    self.posts += 1
                    if self.answer_after_s is None:
                        await asyncio.sleep(3600)  # accepted, read, never answered
                    await asyncio.sleep(self.answer_after_s)
                    status, body = 200, json.dumps(COMPLETION).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test is over
        finally:
            writer.close()


async def _rollout(root: str) -> Trajectory:
    """One turn through our production client, timed; the trajectory records how long it took."""
    t0 = time.monotonic()
    async with openai_client(f"{root}/v1", "key", timeout=1200) as client:
        try:
            r = await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        except Exception as exc:
            exc.add_note(f"after {time.monotonic() - t0:.1f} s")
            raise
    return Trajectory(
        reward=1.0, metrics={"seconds": time.monotonic() - t0}, metadata={"answer": r.choices[0].message.content}
    )


@pytest.fixture(autouse=True)
def short_stall_bound(monkeypatch):
    monkeypatch.setenv("ART_REQUEST_STALL_S", str(STALL_S))


async def test_a_request_no_server_works_on_fails_fast_naming_the_server_while_a_slow_one_is_not_cut():
    # The lost request: the server holds it unanswered and reports nothing running or waiting (issue 37's stall).
    # The slow one: answered after twice the bound, while its server reports it running.
    async with LoopbackServer(vllm_metrics(0), None) as lost, LoopbackServer(vllm_metrics(1), 2 * STALL_S) as slow:
        t0 = time.monotonic()
        [group] = await gather_trajectory_groups([[_rollout(lost.root), _rollout(slow.root)]], max_exceptions=1)
        failed_after = time.monotonic() - t0

    assert lost.posts == 1 and slow.posts == 1
    [error] = group.exceptions
    assert error.type == "ServerStalled"
    assert f"the server at {lost.root} is not working on POST /v1/chat/completions: no answer for" in error.message
    assert "its /metrics reported 0 running and 0 waiting" in error.message
    seconds = float(error.traceback.rsplit("after ", 1)[1].split(" s")[0])
    assert STALL_S <= seconds < BOUND_S  # not the client's 1200 s
    [done] = group.trajectories
    assert done.metadata["answer"] == "hello" and done.metrics["seconds"] >= 2 * STALL_S  # ran past the bound
    assert failed_after >= 2 * STALL_S  # the gather waited for the slow one


async def test_a_server_that_answers_nothing_at_all_is_named_with_its_silent_metrics():
    async with LoopbackServer(None, None) as dead:
        with pytest.raises(Exception) as info:
            await _rollout(dead.root)
    stalled = info.value.__cause__
    assert isinstance(stalled, ServerStalled), info.value
    assert str(stalled).startswith(f"the server at {dead.root} is not working on POST /v1/chat/completions")
    assert "its /metrics did not answer either (ReadTimeout" in str(stalled)
    assert float(info.value.__notes__[0].split()[1]) < BOUND_S


async def test_a_server_without_vllm_metrics_is_never_judged():
    # A hosted API: /metrics is 404, so nothing tells a lost request from a slow one; the client's timeout rules.
    async with LoopbackServer(404, 2 * STALL_S) as hosted:
        t = await _rollout(hosted.root)
    assert t.metadata["answer"] == "hello" and t.metrics["seconds"] >= 2 * STALL_S


# A stand-in for vLLM that we start as a server of ours. /metrics always reports 0 running and 0 waiting. "lose":
# a chat request is read and never answered, with the process idle. "busy SECONDS BODY": one long engine step
# per request, a core at full use, then the answer (vLLM publishes its counts only when a step ends).
STAND_IN_VLLM = """
import http.server, sys, time
lose = sys.argv[2] == "lose"
print("stand-in vLLM: serving; chat requests are " + ("lost" if lose else "answered after a long step"), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'vllm:num_requests_running{engine="0"} 0.0\\nvllm:num_requests_waiting{engine="0"} 0.0\\n'
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        if lose:
            time.sleep(600)
        self.rfile.read(int(self.headers["content-length"]))
        end = time.monotonic() + float(sys.argv[3])
        while time.monotonic() < end:
            sum(i * i for i in range(10000))
        body = sys.argv[4].encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class _LosingServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", STAND_IN_VLLM, str(self.port), "lose"]


async def test_a_stalled_server_we_started_is_named_with_its_pid_and_log(tmp_path):
    server = _LosingServer(ServerConfig(model="/models/tiny", log_path=str(tmp_path / "server.log"))).start()
    pid = server.pid
    try:
        with pytest.raises(TooManyExceptions) as info:
            await gather_trajectory_groups([[_rollout(server.root_url)]], pbar_desc=None)
    finally:
        server.stop()
    stalled = info.value.__cause__
    assert isinstance(stalled, ServerStalled)
    message = str(stalled)
    assert f"the server at {server.root_url} is not working on POST /v1/chat/completions" in message
    assert f"The vLLM server there serves /models/tiny (pid {pid}, is still running)." in message
    assert f"Last lines of {server.log_path}" in message and "stand-in vLLM: serving" in message
    assert "its processes have used next to no CPU" in message  # a lost request on an idle server


class _BusyStepServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", STAND_IN_VLLM, str(self.port), "busy", str(3 * STALL_S), json.dumps(COMPLETION)]


async def test_a_cpu_server_we_started_busy_on_one_long_step_is_not_given_up(tmp_path):
    # vLLM publishes its counts when an engine step ends; on 2 cores the first step of 29 long prompts outlasted
    # the bound with /metrics at 0 running and 0 waiting, and the request was failed as lost. The server's own
    # processes using CPU is the sign of work there.
    server = _BusyStepServer(ServerConfig(model="/models/tiny", log_path=str(tmp_path / "server.log")))
    server.device = "cpu"  # the stand-in computes on the CPU, whatever this machine's vLLM is built for
    server.start()
    try:
        [group] = await gather_trajectory_groups([[_rollout(server.root_url)]], pbar_desc=None)
    finally:
        server.stop()
    [t] = group.trajectories
    assert t.metadata["answer"] == "hello" and t.metrics["seconds"] >= 3 * STALL_S  # ran past the bound


def test_metrics_are_summed_over_engines():
    text = vllm_metrics(2, 1) + 'vllm:num_requests_running{engine="1",model_name="tiny"} 3.0\n'
    assert parse_metrics(text) == {"running": 5.0, "waiting": 1.0, "work": 12.0}


async def test_a_gather_of_long_episodes_says_how_many_requests_were_answered_before_any_episode_ends(
    capsys, monkeypatch
):
    # An evaluation's episodes run concurrently and end together, minutes in: until then its log line must still move.
    monkeypatch.setenv("ART_PROGRESS_EVERY_S", "0.2")
    turns = 8

    async def episode(root: str) -> Trajectory:
        async with openai_client(f"{root}/v1", "key", timeout=60) as client:
            for _ in range(turns):
                await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        return Trajectory(reward=1.0)

    async with LoopbackServer(vllm_metrics(1), 0.15) as server:
        await gather_trajectory_groups([[episode(server.root), episode(server.root)]], pbar_desc="eval val")

    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("eval val: ")]
    before_the_end = [line for line in lines if line.startswith("eval val: 0/2 trajectory") and "requests=" in line]
    assert before_the_end, lines
    assert all(0 < int(line.split("requests=")[1]) < 2 * turns for line in before_the_end), lines
    assert lines[-1].startswith("eval val: 2/2 trajectory (100%)") and lines[-1].endswith(f"requests={2 * turns}")
