"""Which server we own died behind a failed request: a connection error becomes `ServerDied`, naming it.

A rollout whose vLLM server was killed fails with `openai.APIConnectionError: Connection error.`, which says
nothing of the server. `server_died_behind(exc)` looks through the exception's chain for a connection error,
takes the address it was sent to, and when a server this process started answers there no longer (its process
exited), returns a `ServerDied` naming the server (model, address, process id), how it ended (exit code or
signal) and the tail of its log. The gather raises it at once instead of counting another rollout failure:
every later request to that server fails the same way.

A request such a server holds without working on it fails as `ServerStalled` (art_core.inference.http_client);
`stalled_behind(exc)` finds it behind the openai client's `APITimeoutError` and, when the server is one we
started, adds its model, process id and log's tail, as for a dead one.

    try:
        trajectory = await rollout(...)
    except Exception as exc:
        if (died := await server_died_behind(exc, " during the gather")) is not None:
            raise died from exc
        raise
"""

from __future__ import annotations

import asyncio
import time

import httpx

from art_core.inference.http_client import ServerStalled
from art_core.inference.server import ServerDied, VLLMServer, exit_description, started_servers

# A connection refused or reset reaches the client while the killed process is still being torn down;
# its exit status shows a few milliseconds later. How long to wait for it before blaming something else.
EXIT_WAIT_S = 1.0


def connection_error_url(exc: BaseException) -> tuple[bool, httpx.URL | None]:
    """(whether `exc` or an exception in its chain is a connection error, the URL it was sent to if known).

    >>> connection_error_url(ValueError("no"))
    (False, None)
    """
    seen: set[int] = set()
    found, url = False, None
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if _is_connection_error(e):
            found = True
            url = url or _request_url(e)
        e = e.__cause__ or e.__context__
    return found, url


def _is_connection_error(e: BaseException) -> bool:
    if isinstance(e, (httpx.TransportError, ConnectionError)):
        return True
    try:
        import openai
    except ImportError:
        return False
    return isinstance(e, openai.APIConnectionError)


def _request_url(e: BaseException) -> httpx.URL | None:
    try:
        request = getattr(e, "request", None)  # httpx raises RuntimeError when an error carries no request
    except RuntimeError:
        return None
    return request.url if isinstance(request, httpx.Request) else None


def _serves(server: VLLMServer, url: httpx.URL | None) -> bool:
    return url is None or (
        url.port == server.port and url.host in ("127.0.0.1", "localhost", "::1", server.config.host)
    )


async def server_died_behind(exc: BaseException, when: str = "") -> ServerDied | None:
    """A `ServerDied` for the server this process started that `exc`'s failed request was sent to, when its
    process has exited (waiting up to EXIT_WAIT_S for a dying one); None for any other failure.

    `when` ends the message's first sentence, e.g. " during the gather". A connection error that names no
    address blames a server of ours that died, if one did.
    """
    found, url = connection_error_url(exc)
    if not found:
        return None
    candidates = [s for s in started_servers() if _serves(s, url)]
    if not candidates:
        return None
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        dead = [s for s in candidates if s.proc is not None and s.proc.poll() is not None]
        if dead:
            return ServerDied.of(dead[0], when)
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.05)


def stalled_behind(exc: BaseException) -> ServerStalled | None:
    """The `ServerStalled` in `exc`'s chain (None if there is none), with the model, process id and log tail
    of the server when this process started it.

    >>> stalled_behind(ValueError("no")) is None
    True
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and not isinstance(e, ServerStalled):
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    if not isinstance(e, ServerStalled):
        return None
    url = _request_url(e)
    ours = [s for s in started_servers() if url is not None and _serves(s, url)]
    if not ours:
        return e
    server = ours[0]
    state = exit_description(server.proc.poll() if server.proc is not None else None)
    about = f"The vLLM server there serves {server.config.model} (pid {server.pid}, {state})."
    stalled = ServerStalled(f"{e}\n{about}\n{server.describe_log(20)}", request=e.request)
    stalled.__cause__ = e.__cause__
    stalled.__traceback__ = e.__traceback__
    return stalled
