"""Test-wide set-up: where the shared NF-e corpus is.

Tests over the shared invoice corpus read ``PLANDAG_SHARED_NFE`` (a folder of NF-e files
with its ``SOURCES.md``). When it is not set, the first existing of ``<repo>/../shared/data/nfe``
(where CI lays ``shared/`` beside the clone) and ``/work/shared/data/nfe`` is used; tests
that need the corpus skip with a reason when none exists.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]

if not os.environ.get("PLANDAG_SHARED_NFE"):
    for candidate in (_REPO.parent / "shared/data/nfe", Path("/work/shared/data/nfe")):
        if candidate.is_dir():
            os.environ["PLANDAG_SHARED_NFE"] = str(candidate)
            break

# Every run is recorded in a run store; tests never write into the user's store
# (neither the data folder nor a PLANDAG_STORE the user exported): one store per test
# session, in a temporary folder; a test that needs its own sets it.
import tempfile  # noqa: E402

os.environ["PLANDAG_STORE"] = str(
    Path(tempfile.mkdtemp(prefix="plandag-test-store-")) / "runs.sqlite3"
)


# -- local web sites on 127.0.0.1 (untrusted content tests) --------------------------------

import http.server  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

import pytest  # noqa: E402


class LocalSite:
    """A web site on 127.0.0.1 (a port of its own) serving fixed pages and recording every
    request it receives: ``(method, path with query, body)``."""

    def __init__(self, pages: dict[str, tuple[str, str]]) -> None:
        self.pages = pages
        self.requests: list[tuple[str, str, str]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                site.requests.append((self.command, self.path, body))
                content_type, text = site.pages.get(
                    self.path.split("?")[0], ("text/plain", "collected")
                )
                data = text.encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = answer
            do_POST = answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def local_site() -> Iterator[Callable[[dict[str, tuple[str, str]]], LocalSite]]:
    """``local_site({path: (content type, text)})`` starts a :class:`LocalSite`; every site
    started is stopped after the test."""
    sites: list[LocalSite] = []

    def start(pages: dict[str, tuple[str, str]]) -> LocalSite:
        site = LocalSite(pages)
        sites.append(site)
        return site

    yield start
    for site in sites:
        site.close()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Async tests run on asyncio, the backend plandag runs on. anyio's pytest plugin would
    run them on every backend installed, and trio is installed too: Selenium (a test
    dependency, for the web console's browser tests) needs it."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _own_store(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One run store per test: what a test's runs leave (the plan library learns from a
    plain `plandag run`) never reaches another test. A test that needs its own sets it."""
    monkeypatch.setenv(
        "PLANDAG_STORE", str(tmp_path_factory.mktemp("plandag-store") / "runs.sqlite3")
    )
