"""A local OpenAI-compatible judge on 127.0.0.1 that misbehaves on request, for RULER's tests.

It answers POST /v1/chat/completions in a thread of its own (so a slow answer never blocks the test's
event loop) and counts the requests it receives. What it does is chosen per request:
  - `script`: behaviours consumed one per request, in order ("ok", "500", "400", "malformed",
    "wrong_count", "slow");
  - `fail_marker`: requests whose prompt contains this text always get `fail_behaviour`;
  - otherwise "ok": a valid reply for exactly the ids in the request's JSON schema.
A valid reply scores each trajectory by how often the word "SUCCESS" appears in its block, so tests
know which scores to expect.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeJudge:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[str] = []
        self.fail_marker: str | None = None
        self.fail_behaviour = "500"
        self.slow_s = 3.0
        self.delay_s = 0.0  # added to every answer, to observe concurrency
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> "FakeJudge":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.script.clear()
            self.fail_marker = None
            self.fail_behaviour = "500"
            self.delay_s = 0.0
            self.max_in_flight = 0

    # ---- what to answer ---------------------------------------------------------------------
    def _behaviour(self, body: dict[str, Any]) -> str:
        with self._lock:
            prompt = json.dumps(body.get("messages", []))
            if self.fail_marker and self.fail_marker in prompt:
                return self.fail_behaviour
            return self.script.pop(0) if self.script else "ok"

    @staticmethod
    def ids(body: dict[str, Any]) -> list[str]:
        return list(body["response_format"]["json_schema"]["schema"]["properties"])

    @staticmethod
    def expected_scores(body: dict[str, Any]) -> dict[str, float]:
        """Score = min(1, 0.25 * occurrences of SUCCESS in the trajectory's block)."""
        user = body["messages"][-1]["content"]
        out = {}
        for tid in FakeJudge.ids(body):
            block = re.search(rf'<trajectory id="{tid}">(.*?)</trajectory>', user, re.S)
            out[tid] = min(1.0, 0.25 * (block.group(1).count("SUCCESS") if block else 0))
        return out

    def _reply(self, body: dict[str, Any], behaviour: str) -> tuple[int, dict[str, Any] | str]:
        if behaviour == "500":
            return 500, {"error": {"message": "judge overloaded", "type": "server_error"}}
        if behaviour == "400":
            return 400, {"error": {"message": "unknown model", "type": "invalid_request_error"}}
        if behaviour == "slow":
            time.sleep(self.slow_s)
        scores = self.expected_scores(body)
        reply: dict[str, Any] = {tid: {"explanation": f"{tid} counted", "score": s} for tid, s in scores.items()}
        if behaviour == "wrong_count":
            reply.pop(next(iter(reply)))
        content = json.dumps(reply)
        if behaviour == "malformed":
            content = content[: len(content) // 2]
        return 200, {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
        }

    def _handler(self):
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with judge._lock:
                    judge.requests.append(body)
                    judge.in_flight += 1
                    judge.max_in_flight = max(judge.max_in_flight, judge.in_flight)
                try:
                    if judge.delay_s:
                        time.sleep(judge.delay_s)
                    status, payload = judge._reply(body, judge._behaviour(body))
                finally:
                    with judge._lock:
                        judge.in_flight -= 1
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: that is what "slow" tests

        return Handler
