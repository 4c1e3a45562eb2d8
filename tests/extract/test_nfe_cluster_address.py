"""``--cluster tcp://HOST:PORT`` that cannot be used: a clear error, exit 2, and a bounded wait
(an address without a port, a port out of range, nothing listening, a peer that never
speaks, a peer that is not a Dask scheduler)."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.errors import InputError

pytest.importorskip("distributed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"

pytestmark = pytest.mark.timeout(30)


def _extract(tmp_path: Path, address: str) -> tuple[int, str]:
    from plandag.cli import app

    result = CliRunner().invoke(
        app,
        [
            "extract",
            "nfe",
            str(EXAMPLES),
            "-o",
            str(tmp_path / "out.jsonl"),
            "--cluster",
            address,
            "--store",
            str(tmp_path / "store.sqlite3"),
        ],
    )
    return result.exit_code, result.output


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose connections are accepted by the kernel (listen backlog) but
    never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


@pytest.fixture
def banner_port() -> Iterator[int]:
    """A loopback port whose server greets with an SSH banner (a server that is not Dask)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(10)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection, contextlib.suppress(OSError):  # the client may reset it
                connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                connection.recv(16)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=10)


@pytest.fixture(params=["closes", "resets"])
def hanging_up_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A loopback port whose connections are accepted and ended at once with nothing sent:
    closed, or reset, as a port forward, tunnel or proxy with nothing behind it does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(10)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            if request.param == "resets":
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("tcp://127.0.0.1", "no port"),
        ("tcp://127.0.0.1:99999", "port"),
        ("tcp://127.0.0.1:0", "port"),
        ("tcp://:8786", "no host"),
        ("tcp://127.0.0.1:8786/path", "tcp://HOST:PORT"),
    ],
)
def test_a_malformed_scheduler_address_is_refused_before_connecting(
    tmp_path: Path, address: str, says: str
) -> None:
    code, output = _extract(tmp_path, address)

    assert code == 2, output
    assert f"--cluster {address}" in output
    assert says in output
    assert "Traceback" not in output
    assert not (tmp_path / "out.jsonl").exists()


def test_nothing_listening_is_an_error_at_once(tmp_path: Path) -> None:
    port = _closed_port()

    code, output = _extract(tmp_path, f"tcp://127.0.0.1:{port}")

    assert code == 2, output
    # refused at once, not "timed out after 10 s" of connection attempts
    assert "refused" in output
    assert "dask scheduler" in output


def test_a_peer_that_never_speaks_is_given_up_after_the_connect_timeout(
    tmp_path: Path, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plandag.extract import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 0.5)

    with pytest.raises(
        InputError, match=r"unreachable: the connection opened but nothing answered within 0\.5 s"
    ):
        cluster.DaskBackend(f"tcp://127.0.0.1:{silent_port}", 2)


def test_a_peer_that_is_not_a_dask_scheduler_is_an_error(tmp_path: Path, banner_port: int) -> None:
    code, output = _extract(tmp_path, f"tcp://127.0.0.1:{banner_port}")

    assert code == 2, output
    assert "not a Dask scheduler" in output
    assert "Traceback" not in output


@pytest.mark.timeout(60)
def test_a_scheduler_without_workers_is_said_at_once(caplog: pytest.LogCaptureFixture) -> None:
    import distributed

    from plandag.extract import cluster

    with distributed.LocalCluster(
        n_workers=0,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
    ) as scheduler_only:
        address = scheduler_only.scheduler_address
        with caplog.at_level(logging.WARNING, logger="plandag.extract"):
            backend = cluster.DaskBackend(address, 2)
            backend.close()

    ours = [record for record in caplog.records if record.name == "plandag.extract"]
    assert [record.getMessage() for record in ours] == [
        f"--cluster {address}: the scheduler has no worker yet; the documents wait until "
        f"workers join (start them with `dask worker {address} --nthreads 1`)"
    ]


def test_an_address_that_hangs_up_without_a_word_is_unreachable_not_another_server(
    tmp_path: Path, hanging_up_port: int
) -> None:
    code, output = _extract(tmp_path, f"tcp://127.0.0.1:{hanging_up_port}")

    assert code == 2, output
    assert f"--cluster tcp://127.0.0.1:{hanging_up_port}: unreachable" in output
    assert "not a Dask scheduler" not in output
    assert "Traceback" not in output


def test_nothing_answering_is_unreachable(
    tmp_path: Path, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plandag.extract import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 0.5)
    closed = _closed_port()

    for port in (silent_port, closed):
        with pytest.raises(InputError) as raised:
            cluster.probe_scheduler(f"tcp://127.0.0.1:{port}", 0.5)
        assert str(raised.value).startswith(f"--cluster tcp://127.0.0.1:{port}: unreachable")
        assert "not a Dask scheduler" not in str(raised.value)


def test_an_address_that_is_not_a_url_is_refused_with_exit_2(tmp_path: Path) -> None:
    code, output = _extract(tmp_path, "tcp://[::1:8786")

    assert code == 2, output
    assert "--cluster tcp://[::1:8786" in output
    assert "tcp://HOST:PORT" in output
    assert "Traceback" not in output
