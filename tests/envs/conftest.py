"""Fixtures for environment tests: a fake OpenAI-compatible chat server on 127.0.0.1.

The fake is a stand-in peer for testing the episode loop only (the real endpoint is our vLLM server,
used by the tests marked `vllm`). It answers POST /v1/chat/completions with assistant turns queued
per model name, in order, each with made-up sampled token ids and logprobs, and records every request
body. A request for a model with nothing left in its queue gets HTTP 400, so a conversation that runs
longer than its script fails the test instead of hanging.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def tool_call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """A scripted assistant turn that calls one tool (arguments given as a dict, or raw text)."""
    return {"tool_calls": [(name, arguments if isinstance(arguments, str) else json.dumps(arguments))]}


def say(text: str) -> dict[str, Any]:
    """A scripted assistant turn that writes plain text."""
    return {"content": text}


class FakeChatServer:
    def __init__(self) -> None:
        self.queues: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self.requests: list[dict[str, Any]] = []
        self.calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                status, payload = server.answer(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    tool_call = staticmethod(tool_call)
    say = staticmethod(say)

    def script(self, model: str, turns: list[dict[str, Any]]) -> None:
        self.queues[model].extend(turns)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        queue = self.queues[body.get("model", "")]
        if not queue:
            return 400, {
                "error": {
                    "message": f"fake server: no scripted turn left for model {body.get('model')!r}",
                    "type": "invalid_request_error",
                }
            }
        turn = queue.popleft()
        self.calls += 1
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
        if "tool_calls" in turn:
            message["tool_calls"] = [
                {"id": f"call_{self.calls}_{k}", "type": "function", "function": {"name": name, "arguments": args}}
                for k, (name, args) in enumerate(turn["tool_calls"])
            ]
        text = message["content"] or json.dumps(message.get("tool_calls"))
        logprobs = {
            "content": [
                {
                    "token": f"token_id:{(self.calls * 31 + i) % 4000}",
                    "logprob": -0.5,
                    "bytes": None,
                    "top_logprobs": [],
                }
                for i in range(max(1, len(text) // 4))
            ]
        }
        return 200, {
            "id": f"chatcmpl-{self.calls}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": "tool_calls" if "tool_calls" in turn else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": len(logprobs["content"]),
                "total_tokens": 10 + len(logprobs["content"]),
            },
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_chat_server():
    server = FakeChatServer()
    yield server
    server.close()
