"""The local servers started from a shell: a free port unless told, a busy port refused in
one line."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "examples" / "contracts" / "cuad_labels.jsonl"

SERVERS = {
    "testing": [sys.executable, "-m", "plandag.testing", "--exit-after", "30"],
    "research": [sys.executable, "-m", "plandag.jobs.research.scripted"],
    "contracts": [sys.executable, "-m", "plandag.jobs.contracts.scripted", "--labels", str(LABELS)],
}
URL = re.compile(r"http://127\.0\.0\.1:(\d+)")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


@contextlib.contextmanager
def serving(command: list[str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Start a server, read the port from the URL it prints first; stop it on exit."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            found = URL.search(line)
            assert found, line
            yield process, int(found.group(1))
        finally:
            process.terminate()
            process.communicate(timeout=30)


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_two_servers_started_without_a_port_do_not_collide(name: str) -> None:
    with serving(SERVERS[name]) as (_, first_at), serving(SERVERS[name]) as (second, second_at):
        assert first_at != second_at
        assert second.poll() is None  # both serving


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_a_busy_port_is_refused_in_one_line(name: str, busy_port: int) -> None:
    done = subprocess.run(
        [*SERVERS[name], "--port", str(busy_port)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{busy_port} (")
    assert "choose another --port" in line
    assert done.stdout == ""
