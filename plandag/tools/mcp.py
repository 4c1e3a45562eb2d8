"""Tools of MCP servers (the Model Context Protocol, through the official ``mcp`` SDK, which
the ``mcp`` extra installs: ``pip install 'plandag[mcp]'``; importing this module without it
raises ImportError naming the extra).

:class:`McpServers` starts the servers a command names (``--mcp``, ``[[mcp]]`` tables:
:class:`plandag.config.McpServerSpec`), once for the whole run, and turns each tool a server
lists into a plan tool (:class:`~plandag.tools.base.Tool`):

* **Name**: ``NAME_TOOL``, NAME the server's given name, else the name the server gives
  itself (``serverInfo.name``), folded to a Python identifier (every character other than
  an ASCII letter, digit or ``_`` becomes ``_``; ``mcp_`` in front of a name that would
  start with a digit). Two tools that fold to the same name, a name already registered,
  or two servers of the same name are refused, the message naming both.
* **Arguments**: the tool's ``inputSchema`` is its arguments' JSON Schema
  (:attr:`Tool.input_schema`): plans are compiled against it, planners are shown it, and
  every call's arguments are validated against it before they are sent.
* **Effects**: a tool of an MCP server counts as ``irreversible``, as sending data out
  (``egress``) and as bringing outside content in (``taint_source``), not idempotent,
  unless the person declares less for it (``[mcp.tools.NAME]``:
  :class:`~plandag.config.McpToolPolicy`). The server's own annotations narrow this only
  when its table says ``trust_annotations = true``: ``readOnlyHint`` true gives effects
  ``none`` (and idempotent), else ``destructiveHint`` false gives ``write``;
  ``idempotentHint`` true gives idempotent; ``openWorldHint`` false gives neither egress
  nor taint. A person's per-tool declaration wins over the annotations.
* **Approval**: each tool's :attr:`Tool.schema_sha256` (its name on the server, input and
  output schemas and effects, RFC 8785 canonical JSON) is part of the plan's hash, so a
  server that changes a tool after a plan was approved no longer matches the approval.
* **Descriptions** come from the server: planners see them as quoted data
  (:attr:`Tool.origin`).

A call (:meth:`McpServers.call`): the arguments validated against the JSON Schema; at most
the tool's timeout (default 60 s: the ``mcp_timeout`` setting, a ``[[mcp]]`` table's
``timeout`` or a tool's own); the result is the call's ``structuredContent`` when present,
else its text content (the text blocks joined by newlines; the blocks themselves, as JSON,
when none is text). A result with ``isError`` fails the step permanently (reason
``tool_error``), unless the result's ``_meta`` says ``"retryable": true`` (a transient
failure, retried by the run's policy).

A server that **dies** (its process ends, its connection closes) or **hangs** (a call ran
past its timeout and the server does not list its tools within
:data:`~plandag.config.DEFAULT_MCP_CHECK_TIMEOUT` seconds either) is down for the rest of
the run: the call that found it fails (reason ``mcp_server_down``, or ``timeout``) and every
later call of its tools fails at once with
:class:`~plandag.errors.DependencyDownError`, as a dependency taken down by the circuit
breaker; the message says why, with the last lines the server wrote on its standard error.

Lifetime: ``async with McpServers(specs) as servers`` starts every server (each in a task of
one task group, each bounded by its ``startup_timeout``) and stops them all on exit (each
stop bounded by :data:`STOP_TIMEOUT`). :func:`open_mcp_servers` does the same from
synchronous code (the command line): the servers then live on an event loop of their own,
in a thread (an anyio blocking portal), and the run's calls cross over to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import rfc8785

try:
    import mcp.types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError as error:  # the base install: the SDK comes with plandag[mcp]
    missing = (error.name or "mcp").partition(".")[0]
    raise ImportError(
        f"MCP servers need the mcp extra (missing: {missing}): pip install 'plandag[mcp]'",
        name=missing,
    ) from error

from plandag.config import (
    DEFAULT_MCP_CHECK_TIMEOUT,
    McpServerSpec,
    McpToolPolicy,
)
from plandag.errors import (
    DependencyDownError,
    PermanentStepError,
    StepTimeoutError,
    ToolDefinitionError,
    ToolLoadError,
    TransientStepError,
)
from plandag.tools.base import Effects, Tool
from plandag.tools.schema_args import json_schema_args_model

__all__ = [
    "DEFAULT_TIMEOUT",
    "STOP_TIMEOUT",
    "McpServers",
    "ToolPolicy",
    "fold_name",
    "open_mcp_servers",
    "tool_policy",
]

DEFAULT_TIMEOUT = 60.0
"""Seconds a call may take when nothing else says (the ``mcp_timeout`` setting's default)."""
STOP_TIMEOUT = 10.0
"""Seconds a server has to stop when the run ends before it is abandoned (a stdio server's
process is then terminated, then killed, by the SDK)."""
MAX_TOOL_PAGES = 100
"""At most this many pages of a server's tool listing are read."""
STDERR_LINES = 5
"""Lines of a server's standard error quoted in a failure's message (the last ones)."""
STDERR_TAIL = 600
"""At most this many characters of them."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What a tool of an MCP server counts as (module docstring, "Effects").

    Attributes:
        effects: ``none``, ``write`` or ``irreversible``.
        egress: it sends data out.
        taint_source: its results are tainted.
        idempotent: repeating a call is harmless.
        timeout: seconds a call may take.
    """

    effects: Effects
    egress: bool
    taint_source: bool
    idempotent: bool
    timeout: float


def tool_policy(
    annotations: mcp.types.ToolAnnotations | None,
    declared: McpToolPolicy | None,
    *,
    trust_annotations: bool,
    timeout: float,
) -> ToolPolicy:
    """What a tool counts as: the safe default (irreversible, egress, taint source, not
    idempotent), narrowed by the server's annotations only when ``trust_annotations``, then
    what the person declared (each field declared wins).

    Args:
        annotations: the tool's annotations as the server lists them, or None.
        declared: the person's declaration for the tool, or None.
        trust_annotations: the server's table says to trust its annotations.
        timeout: the call timeout when the declaration gives none, seconds.

    Returns:
        The :class:`ToolPolicy`.
    """
    effects: Effects = "irreversible"
    egress = taint_source = True
    idempotent = False
    if trust_annotations and annotations is not None:
        if annotations.read_only_hint is True:
            effects, idempotent = "none", True
        elif annotations.destructive_hint is False:
            effects = "write"
        if annotations.idempotent_hint is True:
            idempotent = True
        if annotations.open_world_hint is False:
            egress = taint_source = False
    if declared is not None:
        if declared.effects is not None:
            effects = declared.effects  # type: ignore[assignment]  # checked by the config
        if declared.egress is not None:
            egress = declared.egress
        if declared.taint_source is not None:
            taint_source = declared.taint_source
        if declared.idempotent is not None:
            idempotent = declared.idempotent
        if declared.timeout is not None:
            timeout = declared.timeout
    return ToolPolicy(effects, egress, taint_source, idempotent, timeout)


def fold_name(*parts: str) -> str:
    """``parts`` joined by ``_`` and folded to a Python identifier (module docstring)."""
    folded = re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))
    if not folded or not (folded[0].isalpha() or folded[0] == "_"):
        folded = "mcp_" + folded
    return folded


def _canonical_sha256(document: Any) -> str:
    try:
        data = rfc8785.dumps(document)
    except Exception:  # a value RFC 8785 refuses (a huge integer): sorted JSON instead
        data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


def _text_of(content: Sequence[Any]) -> Any:
    """A result's content blocks as the step's result: the text blocks joined by newlines,
    or the blocks as JSON when none is text."""
    texts = [block.text for block in content if isinstance(block, mcp.types.TextContent)]
    if texts:
        return "\n".join(texts)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in content]


@dataclasses.dataclass(eq=False)
class _Server:
    """One server while the run lasts."""

    spec: McpServerSpec
    log: Path
    name: str = ""
    client: Client | None = None
    listed: tuple[mcp.types.Tool, ...] = ()
    down: str | None = None
    error: str | None = None
    ready: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    stop: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    scope: anyio.CancelScope | None = None

    @property
    def label(self) -> str:
        return f"MCP server {self.name or '?'} ({self.spec.describe()})"

    def stderr_tail(self) -> str:
        """The last lines the server wrote on its standard error, quoted for a message, or
        "" when it wrote nothing (or is not a stdio server)."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
        if not lines:
            return ""
        tail = " | ".join(lines[-STDERR_LINES:])
        if len(tail) > STDERR_TAIL:
            tail = "..." + tail[-STDERR_TAIL:]
        return f"; the last lines of its standard error: {json.dumps(tail, ensure_ascii=False)}"


class McpServers:
    """The MCP servers of a run, started on entry and stopped on exit (module docstring).

    Args:
        specs: the servers, in order.
        default_timeout: seconds a call may take when neither the server's table nor the
            tool's declaration says (the ``mcp_timeout`` setting).
        check_timeout: seconds a server has to list its tools after a call ran past its
            timeout before it counts as hung.

    Attributes:
        tools: the plan tools of every server, in the servers' order and each server's
            listing order (after entry).
        specs: the servers as started, each with its name (given, or the server's own), so
            that a resumed run starts the same servers under the same names.
        policies: what each tool counts as and how long a call may take
            (:class:`ToolPolicy`), by plan tool name (after entry).
    """

    def __init__(
        self,
        specs: Sequence[McpServerSpec],
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        check_timeout: float = DEFAULT_MCP_CHECK_TIMEOUT,
    ) -> None:
        if not math.isfinite(default_timeout) or default_timeout <= 0:
            raise ValueError("default_timeout must be a number of seconds > 0")
        self._given = tuple(specs)
        self.default_timeout = default_timeout
        self.check_timeout = check_timeout
        self.tools: tuple[Tool, ...] = ()
        self.specs: tuple[McpServerSpec, ...] = ()
        self.policies: dict[str, ToolPolicy] = {}
        self._servers: list[_Server] = []
        self._group: anyio.abc.TaskGroup | None = None
        self._logs: Path | None = None
        self.portal: anyio.from_thread.BlockingPortal | None = None
        """Set by :func:`open_mcp_servers`: the event loop the servers live on, which calls
        made from another loop cross over to."""

    # -- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> McpServers:
        self._logs = Path(tempfile.mkdtemp(prefix="plandag-mcp-"))
        self._servers = [
            _Server(spec, self._logs / f"{index}.stderr")
            for index, spec in enumerate(self._given, start=1)
        ]
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            for server in self._servers:
                group.start_soon(self._serve, server)
            for server in self._servers:
                await server.ready.wait()
            failed = [server for server in self._servers if server.error is not None]
            if failed:
                raise ToolLoadError("; ".join(str(server.error) for server in failed))
            self._build()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._close()

    async def _close(self) -> None:
        """Stop every server and wait for them; an outer cancellation does not cut this
        short (each server's stop is bounded by :data:`STOP_TIMEOUT`)."""
        for server in self._servers:
            server.stop.set()
        group, self._group = self._group, None
        try:
            if group is not None:
                group.cancel_scope.shield = True  # its own scope: a new one breaks LIFO exit
                await group.__aexit__(None, None, None)
        finally:
            if self._logs is not None:
                shutil.rmtree(self._logs, ignore_errors=True)

    async def _serve(self, server: _Server) -> None:
        """Start ``server``, list its tools, keep it until told to stop; whatever goes wrong
        is recorded on it (at start: :attr:`_Server.error`; later: :attr:`_Server.down`)."""
        spec = server.spec
        started = False
        with anyio.CancelScope(deadline=anyio.current_time() + spec.startup_timeout) as scope:
            server.scope = scope
            try:
                async with contextlib.AsyncExitStack() as stack:
                    client = await stack.enter_async_context(
                        Client(self._transport(server, stack), cache=None, mode="auto")
                    )
                    listed = await self._list(client)
                    info = client.server_info
                    server.name = spec.name or (info.name if info is not None else "") or ""
                    server.name = server.name or _fallback_name(spec)
                    server.client, server.listed = client, listed
                    scope.deadline = math.inf
                    started = True
                    server.ready.set()
                    await server.stop.wait()
                    scope.deadline = anyio.current_time() + STOP_TIMEOUT
            except Exception as error:
                if started:
                    server.down = server.down or (
                        f"it stopped while the run was going on ({_reason(error)})"
                    )
                else:
                    server.error = (
                        f"{_label(spec)} did not start: {_reason(error)}{server.stderr_tail()}"
                    )
        if scope.cancelled_caught and not started and server.error is None:
            server.error = (
                f"{_label(spec)} did not start and list its tools within "
                f"{spec.startup_timeout:g} s (startup_timeout){server.stderr_tail()}"
            )
        server.client = None
        server.ready.set()

    def _transport(self, server: _Server, stack: contextlib.AsyncExitStack) -> Any:
        spec = server.spec
        if spec.url is not None:
            return spec.url
        import os

        log = stack.enter_context(server.log.open("a", encoding="utf-8", errors="replace"))
        environment = {name: os.environ[name] for name in spec.env if name in os.environ}
        parameters = StdioServerParameters(
            command=spec.command[0],
            args=list(spec.command[1:]),
            env=environment or None,
            cwd=spec.cwd,
        )
        return stdio_client(parameters, errlog=log)

    @staticmethod
    async def _list(client: Client) -> tuple[mcp.types.Tool, ...]:
        listed: list[mcp.types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(listed)

    # -- the tools ----------------------------------------------------------------------------

    def _build(self) -> None:
        """Make the plan tools of every server; refuse clashing names (ToolLoadError)."""
        names: dict[str, _Server] = {}
        for server in self._servers:
            other = names.get(server.name)
            if other is not None:
                raise ToolLoadError(
                    f"two MCP servers are both named {server.name!r}: {other.spec.describe()} "
                    f"({other.spec.source}) and {server.spec.describe()} "
                    f"({server.spec.source}); name one (--mcp NAME=..., or name = in its "
                    "[[mcp]] table)"
                )
            names[server.name] = server
        tools: dict[str, tuple[Tool, str]] = {}
        for server in self._servers:
            for listed in server.listed:
                made = self._tool(server, listed)
                clash = tools.get(made.name)
                if clash is not None:
                    raise ToolLoadError(
                        f"the MCP tools {clash[1]} and {server.name}/{listed.name} both become the "
                        f"plan tool {made.name}; give one of their servers another name "
                        "(--mcp NAME=..., or name = in its [[mcp]] table)"
                    )
                tools[made.name] = (made, f"{server.name}/{listed.name}")
        self.tools = tuple(made for made, _ in tools.values())
        self.specs = tuple(
            dataclasses.replace(server.spec, name=server.name) for server in self._servers
        )

    def _tool(self, server: _Server, listed: mcp.types.Tool) -> Tool:
        spec = server.spec
        name = fold_name(server.name, listed.name)
        policy = tool_policy(
            listed.annotations,
            spec.tools.get(listed.name),
            trust_annotations=spec.trust_annotations,
            timeout=spec.timeout or self.default_timeout,
        )
        schema = dict(listed.input_schema or {"type": "object"})
        try:
            args_model = json_schema_args_model(name, schema)
        except ToolDefinitionError as error:
            raise ToolLoadError(f"{server.label}, tool {listed.name!r}: {error}") from error
        definition = {
            "server_tool": listed.name,
            "input_schema": schema,
            "output_schema": listed.output_schema,
            "effects": policy.effects,
            "egress": policy.egress,
            "taint_source": policy.taint_source,
            "idempotent": policy.idempotent,
        }
        tool_name = listed.name
        self.policies[name] = policy

        async def call(**arguments: Any) -> Any:
            return await self.call(server, tool_name, arguments, policy.timeout)

        call.__name__ = name
        call.__qualname__ = name
        return Tool(
            name=name,
            description=(listed.description or "").strip(),
            function=call,
            args_model=args_model,
            result_type=Any,
            effects=policy.effects,
            idempotent=policy.idempotent,
            # the runner's own timeout, a backstop: the call's timeout and the check
            # whether the server still answers come first
            timeout=policy.timeout + self.check_timeout + 5.0,
            egress=policy.egress,
            taint_source=policy.taint_source,
            input_schema=schema,
            schema_sha256=_canonical_sha256(definition),
            origin=f"MCP server {server.name} ({spec.describe()}), tool {listed.name!r}",
        )

    def register(self, registry: Any) -> list[str]:
        """Add every tool to ``registry`` (a :class:`~plandag.tools.registry.Registry`) and
        record the servers in its ``mcp_servers``; returns the names added.

        Raises:
            ToolLoadError: a tool's name is already registered (nothing is added then).
        """
        taken = [item for item in self.tools if item.name in registry.tools]
        if taken:
            item = taken[0]
            raise ToolLoadError(
                f"the tool {item.name} of {item.origin} has the name of a tool already "
                "registered (built-in, an application's, or a --tools file's); give the MCP "
                "server another name (--mcp NAME=..., or name = in its [[mcp]] table)"
            )
        for item in self.tools:
            registry.add_tool(item)
        registry.mcp_servers.extend(self.specs)
        return [item.name for item in self.tools]

    # -- calls --------------------------------------------------------------------------------

    async def call(
        self, server: _Server, tool: str, arguments: Mapping[str, Any], seconds: float
    ) -> Any:
        """Call ``tool`` of ``server`` with ``arguments`` (validated already), at most
        ``seconds`` seconds (the tool's timeout), from any event loop (module docstring, "A call").

        Raises:
            DependencyDownError: the server is down (it died or hung earlier in the run).
            TransientStepError: the server died during the call (reason
                ``mcp_server_down``), answered with an internal error, or said the
                failure is retryable.
            StepTimeoutError: no answer within ``seconds`` (the server may be hung: it is
                then down).
            PermanentStepError: the result has ``isError``, or the server refused the
                arguments or the tool.
        """
        portal = self.portal
        if portal is None:
            return await self._call(server, tool, dict(arguments), seconds)
        try:
            future = portal.start_task_soon(self._call, server, tool, dict(arguments), seconds)
        except RuntimeError as error:  # the portal has stopped: the servers were stopped
            raise DependencyDownError(
                f"{server.label} was stopped ({error}); its tools cannot be called any more",
                dependency=f"mcp server {server.name}",
            ) from error
        try:
            return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        finally:
            if not future.done():
                future.cancel()

    async def _call(
        self, server: _Server, tool: str, arguments: dict[str, Any], seconds: float
    ) -> Any:
        """:meth:`call` on the servers' own event loop."""
        where = f"{server.label}, tool {tool!r}"
        client = server.client
        if server.down is not None or client is None:
            raise DependencyDownError(
                f"{where}: the server is down for the rest of the run: "
                f"{server.down or 'it was stopped'}{server.stderr_tail()}",
                dependency=f"mcp server {server.name}",
            )
        try:
            with anyio.fail_after(seconds):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            raise await self._timed_out(server, where, seconds) from None
        except MCPError as error:
            raise await self._protocol_error(server, where, error, seconds) from error
        except Exception as error:  # the transport failed: a connection reset, a dead process
            server.down = server.down or f"the connection failed during a call ({_reason(error)})"
            raise TransientStepError(
                f"{where}: the server failed during the call ({_reason(error)}): it is down for "
                f"the rest of the run{server.stderr_tail()}",
                reason="mcp_server_down",
            ) from error
        if result.is_error:
            message = _text_of(result.content)
            text = message if isinstance(message, str) else json.dumps(message)
            meta = result.meta or {}
            if meta.get("retryable") is True:
                raise TransientStepError(f"{where} failed (retryable): {text}")
            raise PermanentStepError(f"{where} failed: {text}", reason="tool_error")
        if result.structured_content is not None:
            return result.structured_content
        return _text_of(result.content)

    async def _timed_out(self, server: _Server, where: str, seconds: float) -> StepTimeoutError:
        """The error of a call that ran past its ``seconds``: whether the server is hung (it does
        not list its tools within the check timeout either; it is then down)."""
        if await self._answers(server):
            return StepTimeoutError(
                f"{where} did not answer within its timeout of {seconds:g} s (the server "
                "still answers; raise timeout in its [[mcp]] table, or the mcp_timeout "
                "setting, if the tool needs longer)"
            )
        server.down = (
            f"it did not answer a call within {seconds:g} s, nor a listing of its tools within "
            f"{self.check_timeout:g} s after that (hung)"
        )
        return StepTimeoutError(
            f"{where} did not answer within its timeout of {seconds:g} s, and the server no "
            f"longer answers at all: it is hung, and down for the rest of the run"
            f"{server.stderr_tail()}"
        )

    async def _answers(self, server: _Server) -> bool:
        client = server.client
        if client is None:
            return False
        with anyio.move_on_after(self.check_timeout):
            try:
                await client.session.list_tools()
            except Exception:
                return False
            return True
        return False

    async def _protocol_error(
        self, server: _Server, where: str, error: MCPError, seconds: float
    ) -> Exception:
        """The step error of an error the MCP connection reported."""
        if error.code == mcp.types.CONNECTION_CLOSED:
            server.down = server.down or "it closed its connection during a call (it ended?)"
            return TransientStepError(
                f"{where}: the server closed the connection during the call: it is down for "
                f"the rest of the run{server.stderr_tail()}",
                reason="mcp_server_down",
            )
        if error.code == mcp.types.REQUEST_TIMEOUT:
            return await self._timed_out(server, where, seconds)
        if error.code in (mcp.types.INVALID_PARAMS, mcp.types.METHOD_NOT_FOUND):
            return PermanentStepError(
                f"{where}: the server refused the call: {error.message}", reason="invalid_args"
            )
        if error.code == mcp.types.INTERNAL_ERROR:
            return TransientStepError(f"{where}: the server failed: {error.message}")
        return PermanentStepError(f"{where}: the server answered with an error: {error.message}")


def _label(spec: McpServerSpec) -> str:
    name = f" {spec.name}" if spec.name else ""
    return f"MCP server{name} ({spec.describe()}, {spec.source})"


def _reason(error: BaseException) -> str:
    """An exception in words, the leaf of an exception group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, MCPError):
        return f"MCP error {error.code}: {error.message}"
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if str(error) else text


def _fallback_name(spec: McpServerSpec) -> str:
    """A name for a server that gives none: its URL's host, or its script's or program's
    file name without the suffix."""
    if spec.url is not None:
        import urllib.parse

        return (urllib.parse.urlsplit(spec.url).hostname or "mcp").split(".")[0]
    words = [word for word in spec.command if not word.startswith("-")]
    return Path(words[-1] if words else "mcp").stem or "mcp"


@contextlib.contextmanager
def open_mcp_servers(
    specs: Sequence[McpServerSpec],
    *,
    default_timeout: float = DEFAULT_TIMEOUT,
    check_timeout: float = DEFAULT_MCP_CHECK_TIMEOUT,
) -> Iterator[McpServers]:
    """:class:`McpServers` for synchronous code: the servers are started on an event loop
    of their own, in a thread, and stopped when the ``with`` block ends; their tools can be
    called from any other event loop (a run's).

    Args:
        specs: the servers.
        default_timeout: as :class:`McpServers`.
        check_timeout: as :class:`McpServers`.

    Yields:
        The started servers (their ``tools`` made).

    Raises:
        ToolLoadError: a server did not start, or its tools' names clash.
    """
    with anyio.from_thread.start_blocking_portal() as portal:
        servers = McpServers(specs, default_timeout=default_timeout, check_timeout=check_timeout)
        servers.portal = portal
        with portal.wrap_async_context_manager(servers):
            yield servers
