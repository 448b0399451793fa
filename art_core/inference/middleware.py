"""ASGI middleware loaded into the vLLM server (`--middleware`): unknown-model errors list every served name.

vLLM's own 404 names only the base model ("Valid aliases: tiny"), so a rollout asking for `agent@7`
when steps 1-3 are loaded cannot tell what it may ask for. This middleware rewrites that one error to
list the base model and every loaded adapter:

    The model `agent@7` is not served here. Served names: tiny, agent@1, agent@2, agent@3, agent.

It runs inside the server process and only touches 404 responses; every other response passes through
untouched (no buffering), so it costs nothing on the hot path.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def served_names(app: Any) -> list[str]:
    """The base model's served names, then loaded adapters in load order (vLLM's registry on app.state)."""
    models = getattr(getattr(app, "state", None), "openai_serving_models", None)
    if models is None:
        return []
    names = [p.name for p in getattr(models, "base_model_paths", [])]
    names += list(getattr(models, "lora_requests", {}).keys())
    return names


def rewrite_unknown_model(body: bytes, names: list[str]) -> bytes | None:
    """The new body for a vLLM "model does not exist" error, or None when `body` is another error."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or "does not exist" not in str(error.get("message", "")):
        return None
    message = str(error["message"])
    # vLLM quotes the name in backticks: "The model `x` does not exist." / "LoRA adapter x does not exist"
    requested = message.split("`")[1] if message.count("`") >= 2 else message.split(" does not exist")[0]
    error["message"] = f"The model `{requested}` is not served here. Served names: {', '.join(names) or '(none)'}."
    error["param"] = "model"
    return json.dumps(payload).encode()


class ServedNamesOn404:
    """Pure ASGI middleware: buffer 404 responses only, and rewrite the unknown-model one."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def send_wrapper(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message.get("status") == 404:
                start = message
                return
            if start is None:
                await send(message)
                return
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                body = b"".join(chunks)
                new_body = rewrite_unknown_model(body, served_names(scope.get("app")))
                if new_body is not None:
                    body = new_body
                    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                    start = {**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
                await send(start)
                await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, send_wrapper)
