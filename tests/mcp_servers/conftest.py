"""Real MCP servers for the tests (``servers.py``, written with the official SDK), over stdio
(a process the code under test starts) and over streamable HTTP on 127.0.0.1 (a process a
fixture starts on a port the system chooses); the user's trust list, store and working folder
moved into the test's temporary folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVERS = Path(__file__).with_name("servers.py")
STARTUP_LIMIT_S = 60.0
"""The most a test waits for an HTTP server to print its port."""


def stdio_command(*arguments: str) -> tuple[str, ...]:
    """The command that starts the test server over stdio."""
    return (sys.executable, str(SERVERS), *arguments)


def stdio_flag(*arguments: str, name: str | None = None) -> str:
    """The ``--mcp`` value that starts the test server over stdio."""
    import shlex

    line = shlex.join(stdio_command(*arguments))
    return f"{name}={line}" if name else line


@contextlib.contextmanager
def http_server(folder: Path, *arguments: str) -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1, working in ``folder``; yields its
    endpoint's URL and kills the process afterwards."""
    process = subprocess.Popen(
        [sys.executable, str(SERVERS), "--http", *arguments],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(STARTUP_LIMIT_S, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        watchdog.cancel()
        assert line.strip().isdigit(), f"the MCP test server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line)}/mcp"
    finally:
        watchdog.cancel()
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test in its own folder, with its own run store and trust list."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    """The URL of a test server over streamable HTTP (hung for 3 s by its ``hang`` tool)."""
    with http_server(tmp_path, "--hang", "3") as url:
        yield url


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    if status.is_file():
        return status.read_text().split(") ", 1)[-1][:1] != "Z"
    return True


def all_gone(pids: list[int], within_s: float = 10.0) -> bool:
    """Whether every process of ``pids`` has ended, waiting at most ``within_s`` seconds (a
    server told to stop may take a moment to be gone)."""
    import time

    deadline = time.monotonic() + within_s
    while any(process_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
