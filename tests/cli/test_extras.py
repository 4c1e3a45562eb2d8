"""The optional extras: ``plandag serve`` without ``plandag[serve]`` and ``--mcp`` without
``plandag[mcp]`` exit 2 naming them, and the base install (no ``serve``, ``documents`` or
``mcp``) runs ``plandag extract nfe``. A missing extra is simulated by making its modules
fail to import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app

REPO = Path(__file__).resolve().parents[2]

EXTRA_MODULES = (
    "starlette",
    "uvicorn",
    "jinja2",
    "sse_starlette",
    "itsdangerous",
    "multipart",
    "python_multipart",
    "pypdf",
    "docx",
    "mcp",
)


def test_serve_without_the_serve_extra_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(app, ["serve", "--port", "1"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: plandag serve needs the serve extra (missing: uvicorn): pip install "
        "'plandag[serve]'"
    )


def test_mcp_servers_without_the_mcp_extra_exit_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "plandag.tools.mcp", raising=False)
    plan = {"steps": [{"id": "s1", "tool": "echo", "args": {"value": "x"}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    for command in (["check", "plan.json"], ["tools"]):
        result = CliRunner().invoke(app, [*command, "--mcp", "python server.py"])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == (
            "error: MCP servers need the mcp extra (missing: mcp): pip install 'plandag[mcp]'"
        ), command
        assert "Traceback" not in result.output


def test_importing_the_mcp_tools_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "plandag.tools.mcp", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'plandag\[mcp\]'"):
        import plandag.tools.mcp  # noqa: F401


def test_the_base_install_extracts_the_nfe_examples(tmp_path: Path) -> None:
    # a process where no module of the serve and documents extras can be imported
    script = (
        "import sys\n"
        f"for name in {EXTRA_MODULES!r}:\n"
        "    sys.modules[name] = None\n"
        "from plandag.cli import main\n"
        "sys.argv = ['plandag', 'extract', 'nfe', 'examples/nfe', '-o', sys.argv[1]]\n"
        "main()\n"
    )
    output = tmp_path / "invoices.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", script, str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 7
    assert "Traceback" not in done.stderr
