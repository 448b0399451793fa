"""The server process without vLLM: command line, safety defaults, start/stop/restart by process id, errors.

Lifecycle tests run a stand-in server (a few lines of http.server that answers /health and, like vLLM,
has a child process of its own), so they take a second instead of a vLLM start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from art_core.inference.lora import parse_step_name, step_name, write_zero_adapter
from art_core.inference.middleware import ServedNamesOn404, rewrite_unknown_model
from art_core.inference.server import ServerConfig, ServerError, VLLMServer


def test_binds_loopback_with_a_key_unless_asked_otherwise():
    server = VLLMServer(ServerConfig(model="/m", served_model_name="tiny"))
    argv = server.command()
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert server.api_key and len(server.api_key) >= 20
    # The key travels in the environment (readable only by us), never in argv (readable by anyone via ps).
    assert server.api_key not in " ".join(argv)
    assert server.environment()["VLLM_API_KEY"] == server.api_key
    with pytest.raises(ValueError, match="allow_remote=True"):
        VLLMServer(ServerConfig(model="/m", host="0.0.0.0"))
    assert VLLMServer(ServerConfig(model="/m", host="0.0.0.0", allow_remote=True)).config.host == "0.0.0.0"


def test_command_has_lora_tools_and_token_ids():
    config = ServerConfig(model="/m", served_model_name="tiny", max_lora_rank=16, max_loras=6, weight_swap=False)
    server = VLLMServer(config)
    argv = " ".join(server.command())
    assert "-m vllm.entrypoints.openai.api_server" in argv
    assert "--enable-lora --max-lora-rank 16 --max-loras 6" in argv
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in argv
    assert "--return-tokens-as-token-ids" in argv
    env = server.environment()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    if server.device == "cpu":
        assert "--enable-sleep-mode" not in argv and "VLLM_SERVER_DEV_MODE" not in env
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
        assert "--no-enable-chunked-prefill --max-num-batched-tokens 32768" in argv  # seeded requests crash otherwise
        assert server.sleep() is False and server.wake_up() is False  # CPU: a no-op, not an error
        if "VLLM_USE_AOT_COMPILE" not in os.environ:
            assert env["VLLM_USE_AOT_COMPILE"] == "0"  # the compile cache that loads back: a start ~35 s shorter
        forced = VLLMServer(ServerConfig(model="/m", env={"VLLM_USE_AOT_COMPILE": "1"})).environment()
        assert forced["VLLM_USE_AOT_COMPILE"] == "1"  # a caller's choice wins


def test_no_key_when_explicitly_disabled():
    server = VLLMServer(ServerConfig(model="/m", require_api_key=False))
    assert server.api_key is None and "VLLM_API_KEY" not in server.environment()


class _CrashingServer(VLLMServer):
    """Runs a stand-in for vLLM that prints an error and exits, as vLLM does on a bad model or flag."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import sys; print('ValueError: no such model: /nope'); sys.exit(3)"]


def test_failed_start_raises_with_the_log_tail(tmp_path):
    server = _CrashingServer(ServerConfig(model="/nope", log_path=str(tmp_path / "server.log"), startup_timeout_s=60))
    with pytest.raises(ServerError, match="exited with code 3") as info:
        server.start()
    assert "no such model: /nope" in str(info.value)  # the tail of the log says what went wrong
    assert server.proc is None and not server.is_alive()
    with pytest.raises(ServerError, match="never started"):
        server.check()


FAKE_VLLM = """
import http.server, subprocess, sys
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # like vLLM's engine core
print("engine pid", engine.pid, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class _FakeServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", FAKE_VLLM, str(self.port)]


def _engine_pid(server: VLLMServer) -> int:
    for _ in range(100):
        for line in server.log_tail().splitlines():
            if line.startswith("engine pid"):
                return int(line.split()[-1])
        time.sleep(0.05)
    raise AssertionError("the stand-in never reported its engine pid")


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie still answers kill(0); its parent (the server) is gone, so ask /proc
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_stop_ends_the_server_and_its_children(tmp_path):
    server = _FakeServer(ServerConfig(model="/m", log_path=str(tmp_path / "s.log"))).start()
    pid, engine = server.pid, _engine_pid(server)
    server.check()
    server.stop()
    assert _gone(pid) and _gone(engine)
    server.stop()  # a second stop is harmless


def test_dead_server_is_reported_and_restarted_on_the_same_port(tmp_path):
    server = _FakeServer(ServerConfig(model="/m", log_path=str(tmp_path / "s.log"))).start()
    try:
        url, engine = server.base_url, _engine_pid(server)
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)
        with pytest.raises(ServerError, match="died with exit code -9"):
            server.check()
        assert server.ensure_running() is True
        assert server.base_url == url and server.restarts == 1 and _gone(engine)  # the orphan was reaped too
        server.check()
        assert server.ensure_running() is False
    finally:
        server.stop()


def test_sigterm_to_our_process_stops_the_server(tmp_path):
    """A worker stopped with SIGTERM (Prefect, docker, a timeout) must not leave its server running."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from art_core.inference.server import ServerConfig, VLLMServer\n"
        "class Fake(VLLMServer):\n"
        "    def command(self):\n"
        f"        return [sys.executable, '-c', {FAKE_VLLM!r}, str(self.port)]\n"
        f"s = Fake(ServerConfig(model='/m', log_path={str(tmp_path / 's.log')!r})).start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    child = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) != 0
        assert _gone(child)
    finally:
        try:
            os.killpg(child, signal.SIGKILL)  # only if the test failed: leave no server behind
        except ProcessLookupError:
            pass


def test_unknown_model_error_is_rewritten_with_served_names():
    body = json.dumps(
        {
            "error": {
                "message": "The model `agent@7` does not exist. Valid aliases: tiny.",
                "type": "NotFoundError",
                "param": "model",
                "code": 404,
            }
        }
    ).encode()
    out = json.loads(rewrite_unknown_model(body, ["tiny", "agent@1", "agent"]))
    assert out["error"]["message"] == "The model `agent@7` is not served here. Served names: tiny, agent@1, agent."
    assert out["error"]["code"] == 404
    other = json.dumps({"error": {"message": "Not Found"}}).encode()
    assert rewrite_unknown_model(other, ["tiny"]) is None
    assert rewrite_unknown_model(b"not json", ["tiny"]) is None


async def test_middleware_passes_other_responses_untouched():
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    async def send(message):
        sent.append(message)

    await ServedNamesOn404(app)({"type": "http"}, None, send)
    assert [m.get("status") for m in sent] == [200, None] and sent[1]["body"] == b"ok"


def test_step_names_round_trip():
    assert step_name("agent-1", 12) == "agent-1@12"
    assert parse_step_name("agent-1@12") == ("agent-1", 12)
    assert parse_step_name("agent-1") is None and parse_step_name("tiny@x") is None


def test_zero_adapter_matches_the_model_shapes(tiny_model_path, tmp_path):
    from safetensors.numpy import load_file

    out = write_zero_adapter(tiny_model_path, str(tmp_path / "zero"))
    cfg = json.load(open(os.path.join(out, "adapter_config.json")))
    assert cfg["peft_type"] == "LORA" and set(cfg["target_modules"]) >= {"q_proj", "down_proj"}
    weights = load_file(os.path.join(out, "adapter_model.safetensors"))
    hidden = json.load(open(os.path.join(tiny_model_path, "config.json")))["hidden_size"]
    a = weights["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    b = weights["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    assert a.shape == (1, hidden) and b.shape == (hidden, 1) and not b.any()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        write_zero_adapter(str(tmp_path), str(tmp_path / "z2"))


async def test_our_client_lets_idle_connections_go_before_a_stock_vllm_server_closes_them():
    """A server we did not start closes idle connections after vLLM's default 5 s; the openai SDK's pool
    reuses them for 5 s, so a reuse can race the close. Our client lets a connection go sooner."""
    import asyncio
    import threading

    import openai
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from art_core.inference.server import CLIENT_KEEP_ALIVE_S, openai_client

    seen: list[int] = []

    async def models(request):
        seen.append(request.client.port)  # one client port per TCP connection
        return JSONResponse({"object": "list", "data": []})

    with socket.socket() as s:  # a port the OS says is free
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Starlette(routes=[Route("/v1/models", models)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, timeout_keep_alive=5, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            await asyncio.sleep(0.05)

        async def connections(client) -> int:
            seen.clear()
            async with client:
                await client.models.list()
                await asyncio.sleep(CLIENT_KEEP_ALIVE_S + 0.5)
                await client.models.list()
            return len(set(seen))

        url = f"http://127.0.0.1:{port}/v1"
        assert (
            await connections(openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0)) == 1
        )  # the stock pool reuses
        assert await connections(openai_client(url, "k")) == 2
    finally:
        server.should_exit = True
        thread.join(timeout=10)


async def test_our_client_sends_again_once_when_a_reused_connection_is_dropped_unanswered():
    """A proxy or server may close an idle connection on its own schedule; the request that reuses it gets
    no answer. Our client sends it again on a new connection, once: a server that never answers still fails."""
    import asyncio

    import openai

    from art_core.inference.server import openai_client

    attempts: list[int] = []

    def serve(answer_per_connection: int):
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            answered = 0
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                attempts.append(answered)
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if answered == answer_per_connection:  # dropped: closed with nothing sent back
                    writer.close()
                    return
                body = b'{"object": "list", "data": []}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                await writer.drain()
                answered += 1

        return asyncio.start_server(handle, "127.0.0.1", 0)

    server = await serve(answer_per_connection=1)  # each connection answers one request, then drops the next
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server:
        async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as stock:
            await stock.models.list()
            with pytest.raises(openai.APIConnectionError):
                await stock.models.list()  # the reused connection is dropped: the request fails
        attempts.clear()
        async with openai_client(url, "k") as ours:
            await ours.models.list()
            await ours.models.list()  # dropped on the reused connection, answered on a new one
        assert attempts == [0, 1, 0]

    server = await serve(answer_per_connection=0)  # drops every request
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    async with server:
        attempts.clear()
        async with openai_client(url, "k") as ours:
            with pytest.raises(openai.APIConnectionError):
                await ours.models.list()
        assert len(attempts) == 2  # sent again once, not forever


def test_weight_swap_serves_without_lora_and_is_the_cpu_default():
    swap = VLLMServer(ServerConfig(model="/m", served_model_name="tiny", weight_swap=True))
    argv = " ".join(swap.command())
    assert "--enable-lora" not in argv
    assert "--worker-extension-cls art_core.inference.weight_swap.SwapWeights" in argv
    assert swap.environment()["ART_WEIGHT_SWAP"] == "1"
    default = VLLMServer(ServerConfig(model="/m", served_model_name="tiny"))
    assert default.weight_swap == (default.device == "cpu")  # measured on CPU; CUDA keeps LoRA until measured
    assert "ART_WEIGHT_SWAP" not in VLLMServer(ServerConfig(model="/m", weight_swap=False)).environment()
