"""Registry.load_file: a user's --tools FILE.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from plandag.errors import ToolLoadError
from plandag.tools import BUILTIN_TOOLS, Registry

TWO_TOOLS = '''
from plandag.tools import tool, ToolContext, read_file


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


@tool(effects="write", writes="path", idempotent=False)
async def append(path: str, line: str, ctx: ToolContext) -> int:
    """Append a line."""
    return 0
'''


def write(tmp_path: Path, source: str, name: str = "my_tools.py") -> Path:
    file = tmp_path / name
    file.write_text(source, encoding="utf-8")
    return file


def test_load_file_registers_every_tool(tmp_path: Path) -> None:
    registry = Registry(BUILTIN_TOOLS)
    names = registry.load_file(write(tmp_path, TWO_TOOLS))
    assert names == ["shout", "append"]
    assert registry.tools["shout"].function("hi") == "HI"
    assert registry.tools["append"].effects == "write"
    assert registry.tools["append"].idempotent is False
    assert sorted(registry.tools) == [
        "append",
        "json_select",
        "read_file",
        "shout",
        "write_json",
        "xml_select",
    ]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(tmp_path / "none.py")
    assert str(caught.value) == (
        f"tools file {tmp_path / 'none.py'} does not exist; pass a path to a .py file"
    )


def test_a_folder_given_for_the_tools_file_is_named_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(tmp_path)
    assert str(caught.value) == (
        f"tools file {tmp_path} is a folder; give the path of a .py file inside it"
    )


def test_syntax_error(tmp_path: Path) -> None:
    file = write(tmp_path, "from plandag import tool\n\ndef broken(:\n    pass\n")
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(file)
    assert str(caught.value) == (
        f"tools file {file} raised SyntaxError on import: invalid syntax ({file.name}, line 3)"
    )


def test_raising_on_import(tmp_path: Path) -> None:
    file = write(tmp_path, "raise RuntimeError('no database configured')\n")
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(file)
    assert str(caught.value) == (
        f"tools file {file} raised RuntimeError on import: no database configured"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_exit_on_import(tmp_path: Path) -> None:
    file = write(tmp_path, "import sys\nsys.exit(3)\n")
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(file)
    assert str(caught.value) == f"tools file {file} raised SystemExit on import: 3"


def test_defines_nothing(tmp_path: Path) -> None:
    file = write(
        tmp_path, "from plandag.tools import read_file\n\ndef plain(x: int) -> int:\n    return x\n"
    )
    registry = Registry(BUILTIN_TOOLS)
    with pytest.raises(ToolLoadError) as caught:
        registry.load_file(file)
    assert str(caught.value) == (
        f"tools file {file} defines no @tool function; decorate your functions with "
        "`from plandag import tool`"
    )


def test_clash_with_builtin_leaves_registry_unchanged(tmp_path: Path) -> None:
    source = (
        "from plandag.tools import tool\n\n"
        "@tool\ndef fine(x: int) -> int:\n    return x\n\n"
        "@tool\ndef write_json(path: str, data: str) -> None:\n    pass\n"
    )
    file = write(tmp_path, source)
    registry = Registry(BUILTIN_TOOLS)
    with pytest.raises(ToolLoadError) as caught:
        registry.load_file(file)
    assert str(caught.value) == (
        f"tools file {file} defines 'write_json', already registered (a built-in tool or "
        "check, or another tools file); rename it, e.g. with @tool(name=...)"
    )
    assert "fine" not in registry.tools
    assert registry.tools["write_json"] is BUILTIN_TOOLS[1]


def test_two_tools_with_one_name(tmp_path: Path) -> None:
    source = (
        "from plandag.tools import tool\n\n"
        "@tool(name='same')\ndef a() -> int:\n    return 1\n\n"
        "@tool(name='same')\ndef b() -> int:\n    return 2\n"
    )
    with pytest.raises(ToolLoadError) as caught:
        Registry().load_file(write(tmp_path, source))
    assert "defines 'same', already registered" in str(caught.value)
