"""``[[mcp]]`` tables of the project's config, ``--mcp`` values, the trust list, and what an
MCP tool counts as (the safe default, the person's declaration, the server's annotations
only when trusted)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mcp.types
import pytest

from plandag.config import (
    McpServerSpec,
    McpToolPolicy,
    load_mcp_config,
    load_settings,
    parse_mcp_flag,
)
from plandag.errors import InputError
from plandag.tools.mcp import fold_name, tool_policy
from plandag.trust import is_trusted, require_trusted, trust, trust_path

SERVER = """
[[mcp]]
name = "files"
command = "python server.py --root 'my docs'"
env = ["FILES_TOKEN"]
timeout = 5
trust_annotations = true
tools.read.effects = "none"
tools.read.egress = false

[[mcp]]
url = "http://127.0.0.1:8000/mcp"
startup-timeout = 3

[mcp.tools.search]
taint_source = true
idempotent = true
timeout = 2.5
"""


def test_plandag_toml_lists_servers(isolated: Path) -> None:
    (isolated / "plandag.toml").write_text("max_seconds = 30\n" + SERVER, encoding="utf-8")
    config = load_mcp_config()
    assert config is not None
    assert config.path == (isolated / "plandag.toml").resolve()
    first, second = config.servers
    assert first.name == "files"
    assert first.command == ("python", "server.py", "--root", "my docs")
    assert first.env == ("FILES_TOKEN",)
    assert first.cwd == str(isolated.resolve())
    assert first.timeout == 5.0
    assert first.trust_annotations is True
    assert first.tools == {"read": McpToolPolicy(effects="none", egress=False)}
    assert second.url == "http://127.0.0.1:8000/mcp"
    assert second.command == ()
    assert second.startup_timeout == 3.0
    assert second.tools == {
        "search": McpToolPolicy(taint_source=True, idempotent=True, timeout=2.5)
    }
    assert second.source == str(config.path)
    # the settings of the same file still load; the mcp tables are not settings
    assert load_settings()["max_seconds"] == 30.0


def test_pyproject_and_a_parent_folder(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n\n[[tool.plandag.mcp]]\ncommand = ['python', 's.py']\n"
        "args = ['--fast']\n",
        encoding="utf-8",
    )
    inner = isolated / "src" / "deep"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    config = load_mcp_config()
    assert config is not None
    assert config.path == (isolated / "pyproject.toml").resolve()
    [server] = config.servers
    assert server.command == ("python", "s.py", "--fast")
    assert server.cwd == str(isolated.resolve())  # relative paths mean the project's


def test_a_plandag_table_and_no_servers(isolated: Path) -> None:
    (isolated / "plandag.toml").write_text(
        "[plandag]\nretries = 1\n[[plandag.mcp]]\nurl = 'https://127.0.0.1:9/mcp'\n",
        encoding="utf-8",
    )
    config = load_mcp_config()
    assert config is not None
    assert config.servers[0].url == "https://127.0.0.1:9/mcp"
    (isolated / "plandag.toml").write_text("retries = 1\n", encoding="utf-8")
    assert load_mcp_config() is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[[mcp]]\ncomand = 'x'\n", "unknown [[mcp]] key 'comand'; did you mean command?"),
        ("[[mcp]]\nname = 'x'\n", "give either command"),
        ("[[mcp]]\ncommand = 'x'\nurl = 'http://127.0.0.1/'\n", "give either command"),
        ("[[mcp]]\nurl = 'ftp://host/'\n", "url must be an http:// or https:// URL"),
        ("[[mcp]]\ncommand = 'x'\ntimeout = 0\n", "timeout must be a number of seconds > 0"),
        ("[[mcp]]\ncommand = 'x'\nenv = ['A=1']\n", "env must be a list of environment"),
        ("[[mcp]]\ncommand = 'x'\ntools.t.effects = 'some'\n", "effects must be none, write"),
        ("[[mcp]]\ncommand = 'x'\ntools.t.egres = false\n", "did you mean egress?"),
        ("[[mcp]]\ncommand = 'x'\ntools.t.egress = 'no'\n", "egress must be true or false"),
        ("[[mcp]]\ncommand = 'x'\nname = 'a b'\n", "name must be a word"),
        ("mcp = 'x'\n", "mcp must be an array of tables ([[mcp]])"),
    ],
)
def test_malformed_tables_are_refused_with_where_and_what(
    isolated: Path, table: str, message: str
) -> None:
    (isolated / "plandag.toml").write_text(table, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_mcp_config()
    assert message in str(caught.value)
    assert str(isolated / "plandag.toml") in str(caught.value)


def test_mcp_flags() -> None:
    assert parse_mcp_flag("python server.py --x=1", Path("/w")) == McpServerSpec(
        command=("python", "server.py", "--x=1"), cwd="/w"
    )
    assert parse_mcp_flag("docs=uvx some-server").name == "docs"
    assert parse_mcp_flag("docs=uvx some-server").command == ("uvx", "some-server")
    assert parse_mcp_flag("http://127.0.0.1:8000/mcp?a=b") == McpServerSpec(
        url="http://127.0.0.1:8000/mcp?a=b"
    )
    assert parse_mcp_flag("w=https://127.0.0.1/mcp") == McpServerSpec(
        name="w", url="https://127.0.0.1/mcp"
    )
    for bad in ("", "x=", "python 'unclosed", "a*b=python s.py"):
        with pytest.raises(InputError, match="--mcp"):
            parse_mcp_flag(bad)


def test_a_spec_is_stored_and_read_back() -> None:
    spec = McpServerSpec(
        name="files",
        command=("python", "s.py"),
        env=("TOKEN",),
        cwd="/w",
        timeout=3.0,
        trust_annotations=True,
        tools={"read": McpToolPolicy(effects="none", timeout=1.0)},
        source="/w/plandag.toml",
    )
    assert McpServerSpec.from_json(json.loads(json.dumps(spec.as_json()))) == spec


def test_the_trust_list(isolated: Path) -> None:
    project = isolated / "plandag.toml"
    project.write_text(SERVER, encoding="utf-8")
    assert not is_trusted(project)
    with pytest.raises(InputError, match=f"run `plandag trust {project.resolve()}`"):
        require_trusted(project, "MCP servers")
    digest = trust(project)
    assert trust_path() == isolated / "data" / "plandag" / "trusted.json"
    recorded = json.loads(trust_path().read_text())["files"][str(project.resolve())]
    assert recorded["sha256"] == digest
    assert os.stat(trust_path()).st_mode & 0o777 == 0o600
    assert is_trusted(project)
    require_trusted(project, "MCP servers")
    project.write_text(SERVER + "\n# one more line\n", encoding="utf-8")
    assert not is_trusted(project)
    with pytest.raises(InputError, match="changed since it was trusted"):
        require_trusted(project, "MCP servers")


def test_a_broken_trust_list_is_an_input_error(isolated: Path) -> None:
    trust_path().parent.mkdir(parents=True)
    trust_path().write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="cannot be read"):
        is_trusted(isolated)


HINTS = mcp.types.ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)


def test_a_tool_counts_as_the_most_by_default() -> None:
    for hints in (None, mcp.types.ToolAnnotations(readOnlyHint=True), HINTS):
        policy = tool_policy(hints, None, trust_annotations=False, timeout=60.0)
        assert (policy.effects, policy.egress, policy.taint_source, policy.idempotent) == (
            "irreversible",
            True,
            True,
            False,
        )


def test_annotations_narrow_it_only_when_trusted() -> None:
    policy = tool_policy(HINTS, None, trust_annotations=True, timeout=60.0)
    assert (policy.effects, policy.egress, policy.taint_source, policy.idempotent) == (
        "write",
        False,
        False,
        True,
    )
    read_only = mcp.types.ToolAnnotations(readOnlyHint=True)
    policy = tool_policy(read_only, None, trust_annotations=True, timeout=60.0)
    assert (policy.effects, policy.idempotent, policy.egress) == ("none", True, True)


def test_the_person_s_declaration_wins() -> None:
    declared = McpToolPolicy(effects="irreversible", taint_source=True, timeout=2.0)
    policy = tool_policy(HINTS, declared, trust_annotations=True, timeout=60.0)
    assert (policy.effects, policy.taint_source, policy.egress, policy.timeout) == (
        "irreversible",
        True,
        False,
        2.0,
    )
    policy = tool_policy(
        None, McpToolPolicy(effects="none", egress=False), trust_annotations=False, timeout=9.0
    )
    assert (policy.effects, policy.egress, policy.taint_source, policy.timeout) == (
        "none",
        False,
        True,
        9.0,
    )


def test_names_fold_to_python_identifiers() -> None:
    assert fold_name("demo-server", "get.weather") == "demo_server_get_weather"
    assert fold_name("files", "read") == "files_read"
    assert fold_name("1password", "get item") == "mcp_1password_get_item"
    assert fold_name("météo", "prévision") == "m_t_o_pr_vision"
    assert all(fold_name(*parts).isidentifier() for parts in [("a", "b"), ("9", "-"), ("", "")])
