"""What lives as long as one operation (a command, a run's segment): MCP servers started
once for it and stopped when it ends (:func:`operation_lifetime`,
:func:`register_mcp_servers`). The command line opens one lifetime per command; the runs
service starts a stored run's servers again in the current one."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plandag.config import McpServerSpec
    from plandag.tools.mcp import McpServers
    from plandag.tools.registry import Registry

__all__ = ["operation_lifetime", "register_mcp_servers"]


class _Lifetime:
    """What lives as long as one operation: an exit stack closed when it ends, and the MCP
    servers started on it (by their specs, so an operation starts each set once)."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.servers: dict[str, McpServers] = {}


_LIFETIME: contextvars.ContextVar[_Lifetime | None] = contextvars.ContextVar(
    "plandag_command_lifetime", default=None
)


def operation_lifetime() -> contextlib.ExitStack:
    """A new lifetime for the operation about to run (the command line's root callback
    calls it and closes the stack returned when the command ends): the MCP servers
    :func:`register_mcp_servers` starts stop when it closes."""
    lifetime = _Lifetime()
    _LIFETIME.set(lifetime)
    return lifetime.stack


def _started(specs: Sequence[McpServerSpec], timeout: float) -> McpServers:
    """The MCP servers of ``specs``, started once per operation (ToolLoadError when one
    does not start)."""
    from plandag.errors import ToolLoadError

    try:
        from plandag.tools.mcp import open_mcp_servers
    except ImportError as error:  # without plandag[mcp]: the message names the extra
        raise ToolLoadError(str(error)) from error

    lifetime = _LIFETIME.get()
    if lifetime is None:
        raise ToolLoadError(
            "MCP servers are started by a plandag command; from Python, use "
            "plandag.tools.mcp.McpServers (async with) or open_mcp_servers (with)"
        )
    key = json.dumps([spec.as_json() for spec in specs], sort_keys=True) + f"|{timeout}"
    servers = lifetime.servers.get(key)
    if servers is None:
        servers = lifetime.stack.enter_context(open_mcp_servers(specs, default_timeout=timeout))
        lifetime.servers[key] = servers
    return servers


def register_mcp_servers(
    registry: Registry, specs: Sequence[McpServerSpec], timeout: float
) -> list[str]:
    """Start the MCP servers ``specs`` for the operation's length (once per operation:
    :func:`operation_lifetime`) and add their tools to ``registry``.

    Args:
        registry: the registry.
        specs: the servers.
        timeout: seconds a call may take when a server's table says nothing (the
            ``mcp_timeout`` setting).

    Returns:
        The names of the tools added.

    Raises:
        ToolLoadError: a server did not start (or none can be started outside an
            operation), a tool's name clashes, or the ``mcp`` extra (the official SDK) is
            not installed: ``pip install 'plandag[mcp]'``.
    """
    return _started(specs, timeout).register(registry)
