"""Tools: the ``@tool`` decorator, the registry, the write boundary and the built-in tools."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.tools.base import Effects as Effects
    from plandag.tools.base import Tool as Tool
    from plandag.tools.base import ToolContext as ToolContext
    from plandag.tools.base import tool as tool
    from plandag.tools.boundary import WriteBoundary as WriteBoundary
    from plandag.tools.builtins import BUILTIN_TOOLS as BUILTIN_TOOLS
    from plandag.tools.builtins import WriteResult as WriteResult
    from plandag.tools.builtins import json_select as json_select
    from plandag.tools.builtins import read_file as read_file
    from plandag.tools.builtins import write_json as write_json
    from plandag.tools.builtins import xml_select as xml_select
    from plandag.tools.registry import Registry as Registry
    from plandag.tools.registry import default_registry as default_registry
    from plandag.tools.writing import open_for_write as open_for_write
    from plandag.tools.writing import write_atomic as write_atomic

__all__ = [
    "BUILTIN_TOOLS",
    "Effects",
    "Registry",
    "Tool",
    "ToolContext",
    "WriteBoundary",
    "WriteResult",
    "default_registry",
    "json_select",
    "open_for_write",
    "read_file",
    "tool",
    "write_atomic",
    "write_json",
    "xml_select",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "Effects": ("plandag.tools.base", "Effects"),
            "Tool": ("plandag.tools.base", "Tool"),
            "ToolContext": ("plandag.tools.base", "ToolContext"),
            "tool": ("plandag.tools.base", "tool"),
            "WriteBoundary": ("plandag.tools.boundary", "WriteBoundary"),
            "BUILTIN_TOOLS": ("plandag.tools.builtins", "BUILTIN_TOOLS"),
            "WriteResult": ("plandag.tools.builtins", "WriteResult"),
            "json_select": ("plandag.tools.builtins", "json_select"),
            "read_file": ("plandag.tools.builtins", "read_file"),
            "write_json": ("plandag.tools.builtins", "write_json"),
            "xml_select": ("plandag.tools.builtins", "xml_select"),
            "Registry": ("plandag.tools.registry", "Registry"),
            "default_registry": ("plandag.tools.registry", "default_registry"),
            "open_for_write": ("plandag.tools.writing", "open_for_write"),
            "write_atomic": ("plandag.tools.writing", "write_atomic"),
        },
    )
