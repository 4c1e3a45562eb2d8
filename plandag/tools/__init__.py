"""Tools: the ``@tool`` decorator, the registry, the write boundary and the built-in tools."""

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
