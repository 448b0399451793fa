"""Fixtures for the ported ART examples: a LocalBackend on the session's vLLM server, and a moto S3 bucket.

The ports change only `import art` -> `import art_core as art` (and `art.local` -> `art_core.local`);
besides that, each says where it departs from the original for the test machine: the tiny model
instead of Qwen, the session's vLLM server instead of a new one, fewer rollouts, and our vLLM-served
tiny model as the RULER judge.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def s3_bucket(monkeypatch):
    """ART's BACKUP_BUCKET on a moto S3 server on loopback (AWS variables point at it for this test)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "BACKUP_BUCKET": "art-backup",
    }.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="art-backup")
    yield "art-backup"
    server.stop()


class RuleJudge:
    """A stand-in for the scripts' hosted judge (o4-mini): an OpenAI-compatible endpoint on loopback that
    answers RULER's request, in its strict JSON schema, with a fixed rule of each trajectory's text (a
    checksum of its characters, in [0, 1]). Arbitrary but deterministic, so a group's different rollouts
    get different rewards. (The tiny model served by vLLM as judge needs compact JSON decoding to finish
    its replies on CPU; that is tested in tests/rewards.)"""

    def __init__(self) -> None:
        import json
        import re
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls = 0
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                judge.calls += 1
                prompt = body["messages"][-1]["content"]
                reply = {}
                for tid in body["response_format"]["json_schema"]["schema"]["properties"]:
                    block = re.search(rf'<trajectory id="{tid}">(.*?)</trajectory>', prompt, re.S)
                    text = block.group(1) if block else ""
                    reply[tid] = {"explanation": "rule", "score": (sum(map(ord, text)) % 101) / 100}
                data = json.dumps(
                    {
                        "id": "chatcmpl-rule",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": json.dumps(reply)},
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def rule_judge():
    judge = RuleJudge()
    yield judge
    judge.stop()
