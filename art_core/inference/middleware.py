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
import os
from typing import Any, Awaitable, Callable

from art_core.inference.weight_swap import ENV_FLAG, RPC_METHOD

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


SAMPLING_PATHS = ("/v1/chat/completions", "/v1/completions")
LOAD_ADAPTER_PATH = "/v1/load_lora_adapter"
UNLOAD_ADAPTER_PATH = "/v1/unload_lora_adapter"
MODELS_PATH = "/v1/models"


def with_logprobs(body: bytes, path: str, rename: dict[str, str] | None = None) -> bytes | None:
    """The request body with logprobs turned on (and its model renamed per `rename`), or None when it
    already asks for them and needs no new name (or is not JSON).

    >>> with_logprobs(b'{"model": "m", "messages": []}', "/v1/chat/completions")
    b'{"model": "m", "messages": [], "logprobs": true}'
    >>> with_logprobs(b'{"model": "m@2", "logprobs": true}', "/v1/chat/completions", {"m@2": "base"})
    b'{"model": "base", "logprobs": true}'
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return None  # vLLM answers malformed JSON with its own 400
    if not isinstance(payload, dict):
        return None
    changed = False
    if rename and isinstance(payload.get("model"), str) and payload["model"] in rename:
        payload["model"] = rename[payload["model"]]
        changed = True
    if path.endswith("/chat/completions"):
        if payload.get("logprobs") is not True:
            payload["logprobs"] = True
            changed = True
    elif not (isinstance(payload.get("logprobs"), int) and not isinstance(payload.get("logprobs"), bool)):
        payload["logprobs"] = 0  # completions: the sampled token's logprob only
        changed = True
    return json.dumps(payload).encode() if changed else None


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
    return names + [n for n in SWAP.aliases if n not in names]


UNKNOWN_WEIGHTS = "(a merge that failed)"


class SwappedWeights:
    """What a weight-swap server (art_core.inference.weight_swap) serves: the names loaded, each with its
    adapter folder, and the folder merged into the weights now.

    Every sampling request for a loaded name is admitted against its folder: when that folder is merged
    already it runs at once; otherwise the swap waits until the requests in flight on the current weights
    finish, merges the other folder, and lets its requests run (new requests for the old weights wait
    meanwhile, so a waiting swap is never starved). So each request runs on exactly its name's weights, and
    a name loaded earlier (`agent@1` after `agent@2`) is swapped back on demand.
    """

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}  # served name -> adapter folder
        self.current: str | None = None  # the folder merged now; None: the base model's own weights

        self.active = 0  # requests in flight on the current weights
        self.waiting: set[str] = set()  # folders that requests wait for
        self.swapping = False
        self.swaps = 0
        self._cond: Any = None

    @property
    def aliases(self) -> list[str]:
        return list(self.paths)

    def cond(self) -> Any:
        import asyncio

        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def admit(self, app: Any, path: str | None) -> None:
        """Wait until `path`'s weights are served (swapping them in if needed) and count one request on them."""
        cond = self.cond()
        async with cond:
            while True:
                if not self.swapping and self.current == path and not (self.waiting - {path}):
                    self.active += 1
                    return
                if not self.swapping and self.active == 0:
                    self.swapping = True
                    break
                self.waiting.add(path)
                await cond.wait()
                self.waiting.discard(path)
        merged = False
        try:
            await self._merge(app, path)
            merged = True
        finally:
            async with cond:
                self.swapping = False
                self.active += merged  # this request runs on the new weights, counted before anyone swaps again
                cond.notify_all()

    async def release(self) -> None:
        cond = self.cond()
        async with cond:
            self.active -= 1
            cond.notify_all()

    async def _merge(self, app: Any, path: str | None) -> None:
        if path == self.current:
            return
        engine = app.state.engine_client
        await engine.pause_generation(mode="wait", clear_cache=True)  # nothing runs: the prefix cache goes
        try:
            self.current = UNKNOWN_WEIGHTS  # until the merge is whole, nothing trusts the weights
            await engine.collective_rpc(RPC_METHOD, args=(path, os.environ["ART_BASE_MODEL"]))
            self.current = path
            self.swaps += 1
        finally:
            await engine.resume_generation()

    async def load(self, app: Any, name: str, path: str) -> None:
        """Serve the adapter folder `path` as `name`, merged into the weights now (which checks it)."""
        path = os.path.abspath(path)
        await self.admit(app, path)
        await self.release()
        self.paths[name] = path

    def unload(self, name: str) -> bool:
        return self.paths.pop(name, None) is not None


SWAP = SwappedWeights()  # one per server process
# Whether this server serves steps by merging them (VLLMServer sets the variable for a weight-swap server): read
# once, at the server's start, instead of on every request.
SWAP_ON = os.environ.get(ENV_FLAG) == "1"


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
    a local copy fetched here (art_core.adapters.fetch_adapter); None when it already names a local folder.

    This is how a replica on another machine gets adapters: through the run's storage, never a local path
    of the trainer's machine. The base model (for the zero adapter) is ART_BASE_MODEL, set by VLLMServer.
    """
    import asyncio

    from art_core.adapters import ZERO_ADAPTER_SOURCE, fetch_adapter

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
        method, path = scope.get("method"), scope.get("path", "")
        swap = SWAP_ON
        if method == "POST" and path.endswith(SAMPLING_PATHS):
            body, others = await _read_body(receive)
            requested = _field(body, "model") if swap else None
            base = _base_name(scope.get("app")) if swap else None
            if requested is not None and (requested in SWAP.paths or requested == base):
                rename = {requested: base} if requested != base else None
                scope, receive = _replay(scope, receive, body, with_logprobs(body, path, rename), others)
                await SWAP.admit(scope["app"], SWAP.paths.get(requested))  # the base name: its own weights
                try:
                    await self.app(scope, receive, send)
                finally:
                    await SWAP.release()
                return
            scope, receive = _replay(scope, receive, body, with_logprobs(body, path), others)
        elif method == "POST" and path.endswith(LOAD_ADAPTER_PATH):
            try:
                scope, receive = await self._fetch_adapter(scope, receive)
            except Exception as e:  # say why in the response, as vLLM's own refusals do
                await _error(send, 400, f"could not fetch the adapter from storage: {type(e).__name__}: {e}")
                return
            if swap:
                await self._swap_in(scope, receive, send)
                return
        elif method == "POST" and path.endswith(UNLOAD_ADAPTER_PATH) and swap:
            body, _ = await _read_body(receive)
            name = _field(body, "lora_name") or ""
            if SWAP.unload(name):
                await _send(send, 200, f"Success: LoRA adapter '{name}' removed successfully.".encode(), b"text/plain")
            else:
                await _error(send, 404, f"The model `{name}` is not served here.", kind="NotFoundError")
            return
        list_aliases = swap and method == "GET" and path.endswith(MODELS_PATH) and bool(SWAP.aliases)
        start: Message | None = None
        chunks: list[bytes] = []

        async def send_wrapper(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and (
                message.get("status") == 404 or (list_aliases and message.get("status") == 200)
            ):
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
                if start.get("status") == 404:
                    new_body = rewrite_unknown_model(body, served_names(scope.get("app")))
                else:
                    new_body = with_aliases(body, SWAP.paths)
                if new_body is not None:
                    body = new_body
                    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                    start = {**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
                await send(start)
                await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, send_wrapper)

    @staticmethod
    async def _swap_in(scope: Scope, receive: Receive, send: Send) -> None:
        """A load_lora_adapter request on a weight-swap server: merge the adapter into the weights."""
        body, _ = await _read_body(receive)
        name, path = _field(body, "lora_name"), _field(body, "lora_path")
        if not name or not path:
            await _error(send, 400, "load_lora_adapter needs lora_name and lora_path")
            return
        try:
            await SWAP.load(scope["app"], name, path)
        except Exception as e:
            await _error(send, 400, f"could not merge the adapter at {path} into the served weights: {e}")
            return
        await _send(send, 200, f"Success: LoRA adapter '{name}' added successfully.".encode(), b"text/plain")

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


async def _error(send: Send, status: int, message: str, kind: str = "BadRequestError") -> None:
    body = json.dumps({"error": {"message": message, "type": kind, "param": "model", "code": status}}).encode()
    await _send(send, status, body, b"application/json")


async def _send(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _field(body: bytes, key: str) -> str | None:
    """A string field of a JSON object body, or None."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


def _base_name(app: Any) -> str:
    models = getattr(getattr(app, "state", None), "openai_serving_models", None)
    paths = getattr(models, "base_model_paths", None) or []
    return paths[0].name if paths else ""


def with_aliases(body: bytes, aliases: dict[str, str]) -> bytes | None:
    """A /v1/models listing with each weight-swap name added as vLLM lists a LoRA adapter (with a parent)."""
    try:
        payload = json.loads(body)
        data = payload["data"]
    except (ValueError, KeyError, TypeError):
        return None
    base = next((m for m in data if not m.get("parent")), None)
    if base is None:
        return None
    listed = {m.get("id") for m in data}
    for alias, path in aliases.items():
        if alias not in listed:
            data.append({**base, "id": alias, "root": path, "parent": base["id"]})
    return json.dumps(payload).encode()


# The name server.py loads with --middleware.
ServedNamesOn404 = ServerDefaults
