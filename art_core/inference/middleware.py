"""ASGI middleware loaded into the vLLM server (`--middleware`): logprobs on every request, and
unknown-model errors that list every served name.

Logprobs by default: ART's server returns each sampled token's logprob (and, with the server's
`--return-tokens-as-token-ids`, its id) on every request, so ART rollouts never ask for them, and our
trainer needs them. This middleware adds `logprobs` to each /v1/chat/completions and /v1/completions
request that does not ask for it (chat: `"logprobs": true`; completions: `"logprobs": 0`, the sampled
token only). Any client gets them, whether it uses `model.openai_client()` or builds its own. A
request that asks for top logprobs keeps what it asked for.

vLLM's own 404 names only the base model ("Valid aliases: tiny"), so a rollout asking for `agent@7`
when steps 1-3 are loaded cannot tell what it may ask for. This middleware rewrites that one error to
list the base model and every loaded adapter:

    The model `agent@7` is not served here. Served names: tiny, agent@1, agent@2, agent@3, agent.

It runs inside the server process; only sampling requests' bodies and 404 responses are buffered, and
every other message passes through untouched (bench/inference.py measures the cost: none measurable).
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


SAMPLING_PATHS = ("/v1/chat/completions", "/v1/completions")
LOAD_ADAPTER_PATH = "/v1/load_lora_adapter"


def with_logprobs(body: bytes, path: str) -> bytes | None:
    """The request body with logprobs turned on, or None when it already asks for them (or is not JSON).

    >>> with_logprobs(b'{"model": "m", "messages": []}', "/v1/chat/completions")
    b'{"model": "m", "messages": [], "logprobs": true}'
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return None  # vLLM answers malformed JSON with its own 400
    if not isinstance(payload, dict):
        return None
    if path.endswith("/chat/completions"):
        if payload.get("logprobs") is True:
            return None
        payload["logprobs"] = True
    else:
        if isinstance(payload.get("logprobs"), int) and not isinstance(payload.get("logprobs"), bool):
            return None
        payload["logprobs"] = 0  # completions: the sampled token's logprob only
    return json.dumps(payload).encode()


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The whole request body, and any non-body message received meanwhile (a disconnect)."""
    chunks: list[bytes] = []
    others: list[Message] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            others.append(message)
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks), others


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


async def with_fetched_adapter(body: bytes) -> bytes | None:
    """A load_lora_adapter body whose `lora_path` names storage (s3://...) or the zero adapter, rewritten to
    a local copy fetched here (art_core.serving.fetch_adapter); None when it already names a local folder.

    This is how a replica on another machine gets adapters: through the run's storage, never a local path
    of the trainer's machine. The base model (for the zero adapter) is ART_BASE_MODEL, set by VLLMServer.
    """
    import asyncio
    import os

    from art_core.serving import ZERO_ADAPTER_SOURCE, fetch_adapter

    try:
        payload = json.loads(body)
    except ValueError:
        return None
    source = payload.get("lora_path") if isinstance(payload, dict) else None
    if not isinstance(source, str) or not ("://" in source or source == ZERO_ADAPTER_SOURCE):
        return None
    base_model = os.environ.get("ART_BASE_MODEL", "")
    payload["lora_path"] = await asyncio.to_thread(fetch_adapter, source, base_model)
    return json.dumps(payload).encode()


class ServerDefaults:
    """Pure ASGI middleware: logprobs on sampling requests; the unknown-model 404 lists served names."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "POST" and scope.get("path", "").endswith(SAMPLING_PATHS):
            scope, receive = await self._ask_for_logprobs(scope, receive)
        elif scope.get("method") == "POST" and scope.get("path", "").endswith(LOAD_ADAPTER_PATH):
            try:
                scope, receive = await self._fetch_adapter(scope, receive)
            except Exception as e:  # say why in the response, as vLLM's own refusals do
                await _error(send, 400, f"could not fetch the adapter from storage: {type(e).__name__}: {e}")
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

    @staticmethod
    async def _ask_for_logprobs(scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
        body, others = await _read_body(receive)
        return _replay(scope, receive, body, with_logprobs(body, scope["path"]), others)

    @staticmethod
    async def _fetch_adapter(scope: Scope, receive: Receive) -> tuple[Scope, Receive]:
        body, others = await _read_body(receive)
        return _replay(scope, receive, body, await with_fetched_adapter(body), others)


def _replay(
    scope: Scope, receive: Receive, body: bytes, new: bytes | None, others: list[Message]
) -> tuple[Scope, Receive]:
    """The request again, with its body replaced by `new` when given (content-length follows)."""
    if new is not None:
        body = new
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
    replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}, *others]

    async def replayed() -> Message:
        return replay.pop(0) if replay else await receive()

    return scope, replayed


async def _error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "BadRequestError", "code": status}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# The name server.py loads with --middleware.
ServedNamesOn404 = ServerDefaults
