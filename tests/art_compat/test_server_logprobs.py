"""Our server returns logprobs on every sampling request, as ART's does (art_core.inference.middleware).

The ASGI middleware is driven here directly, with a stand-in app that records the body it receives;
the ported notebooks (test_tic_tac_toe_notebook.py) check the same through the real vLLM server.
"""

from __future__ import annotations

import json

from art_core.inference.middleware import ServedNamesOn404


async def call(path: str, payload: dict, chunks: int = 1) -> dict:
    seen: dict = {}

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen["body"] = json.loads(body)
        seen["length"] = dict(scope["headers"]).get(b"content-length")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    raw = json.dumps(payload).encode()
    size = -(-len(raw) // chunks)
    parts = [raw[i : i + size] for i in range(0, len(raw), size)]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]

    async def receive():
        return messages.pop(0)

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", str(len(raw)).encode())]}
    await ServedNamesOn404(app)(scope, receive, send)
    assert sent[0]["status"] == 200
    assert seen["length"] == str(len(json.dumps(seen["body"]).encode())).encode()  # the header matches the new body
    return seen["body"]


async def test_chat_requests_get_logprobs_whether_or_not_they_ask():
    body = await call(
        "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi" * 500}]}, chunks=3
    )
    assert body["logprobs"] is True and body["messages"][0]["content"] == "hi" * 500
    assert (await call("/v1/chat/completions", {"model": "m", "messages": [], "logprobs": False}))["logprobs"] is True
    asked = await call("/v1/chat/completions", {"model": "m", "messages": [], "logprobs": True, "top_logprobs": 5})
    assert asked["top_logprobs"] == 5  # what a client asked for is kept


async def test_completions_get_the_sampled_tokens_logprob_and_keep_a_requested_count():
    assert (await call("/v1/completions", {"model": "m", "prompt": "x"}))["logprobs"] == 0
    assert (await call("/v1/completions", {"model": "m", "prompt": "x", "logprobs": 3}))["logprobs"] == 3
