"""http_get / http_post: a real server on 127.0.0.1 and httpx.MockTransport; status
classification, retries through run_plan, size and redirect limits, the write boundary."""

from __future__ import annotations

import email.utils
import http.server
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import anyio
import httpx
import pytest

from plandag.brakes import UNLIMITED
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.errors import (
    NotStartedError,
    PermanentStepError,
    PlanError,
    StepError,
    TransientStepError,
    classify_error,
)
from plandag.scheduler import RunLimits, RunResult, run_plan_sync
from plandag.tools.base import Tool, ToolContext, tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.http import http_get, http_post, set_transport, use_transport
from plandag.tools.registry import Registry, default_registry

# -- a tiny real server ----------------------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    """Routes by path; counts hits per path in ``hits`` and keeps POST bodies in ``posted``."""

    hits: ClassVar[Counter[str]] = Counter()
    posted: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
        pass

    def reply(
        self,
        status: int,
        body: bytes = b"",
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
        length: bool = True,
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.hits[path] += 1
        count = self.hits[path]
        if path == "/json":
            self.reply(200, json.dumps({"ok": True, "query": self.path}).encode())
        elif path == "/latin":
            self.reply(200, "café".encode("latin-1"), "text/plain; charset=latin-1")
        elif path == "/binary":
            self.reply(200, b"\x89PNG\r\n", "image/png")
        elif path.startswith("/status/"):
            self.reply(int(path.rsplit("/", 1)[1]), b'{"error": "nope"}')
        elif path == "/flaky":  # 503, 503, then 200
            if count < 3:
                self.reply(503, b"busy", "text/plain")
            else:
                self.reply(200, json.dumps({"attempt": count}).encode())
        elif path == "/limited":  # 429 with Retry-After: 7, then 200
            if count == 1:
                self.reply(429, b"slow down", "text/plain", {"Retry-After": "7"})
            else:
                self.reply(200, b'{"ok": true}')
        elif path == "/big":  # 5000 bytes, no Content-Length: only streaming can stop it
            self.reply(200, b"x" * 5000, "text/plain", length=False)
        elif path == "/big-declared":
            self.reply(200, b"x" * 5000, "text/plain")
        elif path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            if left == 0:
                self.reply(200, b'{"arrived": true}')
            else:
                self.reply(302, b"", None, {"Location": f"/redirect/{left - 1}"})
        elif path == "/bad-json":
            self.reply(200, b"{not json")
        else:
            self.reply(404, b"not here", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        self.hits[path] += 1
        size = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(size).decode()
        self.posted.append(
            {
                "path": path,
                "body": body,
                "type": self.headers.get("Content-Type"),
                "key": self.headers.get("Idempotency-Key"),
            }
        )
        if path == "/echo":
            self.reply(201, json.dumps({"received": body}).encode())
        elif path.startswith("/status/"):
            self.reply(int(path.rsplit("/", 1)[1]), b"", "text/plain", {"Retry-After": "2"})
        elif path == "/see-other":
            self.reply(303, b"", None, {"Location": "/json"})
        elif path == "/moved":
            self.reply(307, b"", None, {"Location": "/echo"})
        else:
            self.reply(404, b"", "text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A ThreadingHTTPServer on 127.0.0.1 (port 0); yields its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No proxy from the environment, fresh server counters, the real transport."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    Handler.hits.clear()
    Handler.posted.clear()
    previous = set_transport(None)
    yield
    set_transport(previous)


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def call(item: Tool, **args: Any) -> Any:
    """Invoke a tool once, as the runner would (arguments validated)."""

    async def main() -> Any:
        return await item.invoke(args, ToolContext(run_id="run", step_id=9))

    return anyio.run(main)


def failure(item: Tool, **args: Any) -> StepError:
    with pytest.raises(StepError) as caught:
        call(item, **args)
    return caught.value


@tool
async def echo(value: Any) -> Any:
    """Return ``value``."""
    return value


def run(
    steps: list[dict[str, Any]],
    *,
    retries: int = 2,
    boundary: WriteBoundary | None = None,
    clock: VirtualClock | None = None,
    http_allow: list[str] | None = None,
    read_only: bool = False,
) -> RunResult:
    registry = Registry([echo, http_get, http_post], BUILTIN_CHECKS)
    compiled = compile_plan(
        {"steps": steps},
        registry,
        write_boundary=boundary,
        http_allow=http_allow,
        read_only=read_only,
    )
    return run_plan_sync(
        compiled,
        approve="auto",
        write_boundary=UNLIMITED if boundary is None else None,
        run_id="r",
        retry=RetryPolicy(retries=retries),
        clock=clock or VirtualClock(),
        # Retries after a Retry-After of seconds take a 0.5 s request past 3x its estimate:
        # these tests are about retries, so the plan-relative time limit is lifted.
        limits=RunLimits(plan_time_factor=None),
    )


def get_step(url: str, **args: Any) -> dict[str, Any]:
    return {"id": 1, "tool": "http_get", "args": {"url": url, **args}}


# -- declarations ----------------------------------------------------------------------------


def test_declarations() -> None:
    assert (http_get.effects, http_get.idempotent, http_get.writes) == ("none", True, None)
    assert (http_post.effects, http_post.idempotent, http_post.writes) == ("write", False, "url")
    assert http_post.write_targets({"url": "https://a.example/x"}) == ["https://a.example/x"]
    assert {"http_get", "http_post"} <= set(default_registry().tools)
    schema = http_get.json_schema()
    assert schema["properties"]["timeout"]["exclusiveMinimum"] == 0
    assert "ctx" not in http_post.json_schema()["properties"]


# -- the real server -------------------------------------------------------------------------


def test_get_json(server: str) -> None:
    response = call(http_get, url=f"{server}/json", params={"q": "a b", "n": 2})
    assert response["status"] == 200
    assert response["json"] == {"ok": True, "query": "/json?q=a+b&n=2"}
    assert response["text"] == json.dumps({"ok": True, "query": "/json?q=a+b&n=2"})
    assert response["url"] == f"{server}/json?q=a+b&n=2"
    assert response["headers"]["content-type"] == "application/json"


def test_text_charset_and_binary(server: str) -> None:
    latin = call(http_get, url=f"{server}/latin")
    assert (latin["text"], latin["json"]) == ("café", None)
    binary = call(http_get, url=f"{server}/binary")
    assert (binary["status"], binary["text"], binary["json"]) == (200, None, None)


def test_bad_json_is_permanent(server: str) -> None:
    error = failure(http_get, url=f"{server}/bad-json")
    assert type(error) is PermanentStepError
    assert error.reason == "invalid_json"


@pytest.mark.parametrize(
    ("status", "kind", "reason"),
    [
        (400, PermanentStepError, "http_400"),
        (401, PermanentStepError, "http_401"),
        (404, PermanentStepError, "http_404"),
        (422, PermanentStepError, "http_422"),
        (500, TransientStepError, "http_500"),
        (503, TransientStepError, "http_503"),
        (529, TransientStepError, "http_529"),
    ],
)
def test_status_classification(server: str, status: int, kind: type, reason: str) -> None:
    error = failure(http_get, url=f"{server}/status/{status}")
    assert type(error) is kind
    assert error.reason == reason
    assert str(error).startswith(f"GET {server}/status/{status}: HTTP {status}")
    assert str(error).endswith('{"error": "nope"}')
    assert classify_error(error) == ("transient" if kind is TransientStepError else "permanent")


def test_404_is_not_retried(server: str) -> None:
    result = run([get_step(f"{server}/status/404")])
    record = result.steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "http_404", 1)
    assert record.attempt_log[0].retry == "permanent"
    assert Handler.hits["/status/404"] == 1


def test_503_is_retried_then_fails(server: str) -> None:
    clock = VirtualClock()
    result = run([get_step(f"{server}/status/503")], clock=clock)
    record = result.steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "http_503", 3)
    assert [attempt.retry for attempt in record.attempt_log] == [
        "retried",
        "retried",
        "retries_exhausted",
    ]
    assert Handler.hits["/status/503"] == 3
    assert len(clock.sleeps) == 2


def test_503_twice_then_success(server: str) -> None:
    result = run([get_step(f"{server}/flaky")])
    record = result.steps[1]
    assert (record.status, record.attempts) == ("succeeded", 3)
    assert record.result["json"] == {"attempt": 3}


def test_429_waits_for_retry_after(server: str) -> None:
    clock = VirtualClock()
    result = run([get_step(f"{server}/limited")], clock=clock)
    record = result.steps[1]
    assert (record.status, record.attempts) == ("succeeded", 2)
    assert record.attempt_log[0].reason == "http_429"
    assert record.attempt_log[1].delay_before_s == 7.0
    assert clock.sleeps == [7.0]


def test_429_carries_retry_after_and_precedes_any_effect(server: str) -> None:
    error = failure(http_post, url=f"{server}/status/429", json={})
    assert isinstance(error, TransientStepError)
    assert (error.reason, error.retry_after, error.before_effect) == ("http_429", 2.0, True)


def test_post_503_is_not_retried_since_the_outcome_is_unknown(server: str) -> None:
    boundary = WriteBoundary.from_specs([server])
    steps = [{"id": 1, "tool": "http_post", "args": {"url": f"{server}/status/503", "json": {}}}]
    record = run(steps, boundary=boundary).steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "http_503", 1)
    assert record.attempt_log[0].retry == "not_idempotent"
    assert Handler.hits["/status/503"] == 1


def test_post_429_is_retried_even_though_not_idempotent(server: str) -> None:
    boundary = WriteBoundary.from_specs([server])
    steps = [{"id": 1, "tool": "http_post", "args": {"url": f"{server}/status/429", "json": {}}}]
    record = run(steps, boundary=boundary).steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "http_429", 3)
    assert Handler.hits["/status/429"] == 3


def test_connection_refused_is_not_started(closed_port: int) -> None:
    error = failure(http_get, url=f"http://127.0.0.1:{closed_port}/x", timeout=2.0)
    assert type(error) is NotStartedError
    assert (error.reason, error.before_effect) == ("connect_error", True)


def test_post_to_a_refused_connection_is_retried(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/x"
    steps = [{"id": 1, "tool": "http_post", "args": {"url": url, "timeout": 2.0}}]
    record = run(steps, boundary=WriteBoundary.from_specs([url])).steps[1]
    assert (record.status, record.reason, record.attempts) == ("failed", "connect_error", 3)
    assert [attempt.retry for attempt in record.attempt_log] == [
        "retried",
        "retried",
        "retries_exhausted",
    ]


def test_oversized_body_is_refused_while_streaming(server: str) -> None:
    error = failure(http_get, url=f"{server}/big", max_bytes=1000)
    assert type(error) is PermanentStepError
    assert error.reason == "too_large"
    assert "passed max_bytes=1000 bytes; reading stopped" in str(error)
    assert call(http_get, url=f"{server}/big", max_bytes=5000)["text"] == "x" * 5000


def test_oversized_content_length_is_refused_before_reading(server: str) -> None:
    error = failure(http_get, url=f"{server}/big-declared", max_bytes=4999)
    assert error.reason == "too_large"
    assert "the body is 5000 bytes (Content-Length), over max_bytes=4999" in str(error)


def test_redirects_are_followed_up_to_the_limit(server: str) -> None:
    response = call(http_get, url=f"{server}/redirect/3")
    assert (response["status"], response["url"]) == (200, f"{server}/redirect/0")
    assert response["json"] == {"arrived": True}

    Handler.hits.clear()
    error = failure(http_get, url=f"{server}/redirect/6", max_redirects=5)
    assert type(error) is PermanentStepError
    assert error.reason == "too_many_redirects"
    assert sum(Handler.hits.values()) == 6  # the first request and 5 redirects, no more

    error = failure(http_get, url=f"{server}/redirect/1", max_redirects=0)
    assert error.reason == "too_many_redirects"


def test_post_sends_json_with_an_idempotency_key(server: str) -> None:
    response = call(http_post, url=f"{server}/echo", json={"a": [1, 2]})
    assert (response["status"], response["json"]) == (201, {"received": '{"a":[1,2]}'})
    assert Handler.posted == [
        {"path": "/echo", "body": '{"a":[1,2]}', "type": "application/json", "key": "run:9"}
    ]


def test_post_form_and_own_idempotency_key(server: str) -> None:
    call(http_post, url=f"{server}/echo", data={"x": "1"}, headers={"idempotency-key": "mine"})
    assert Handler.posted == [
        {
            "path": "/echo",
            "body": "x=1",
            "type": "application/x-www-form-urlencoded",
            "key": "mine",
        }
    ]


def test_post_redirects_are_not_followed(server: str) -> None:
    see_other = call(http_post, url=f"{server}/see-other", json={})
    assert (see_other["status"], see_other["headers"]["location"]) == (303, "/json")
    assert Handler.hits["/json"] == 0

    error = failure(http_post, url=f"{server}/moved", json={"a": 1})
    assert type(error) is PermanentStepError
    assert error.reason == "redirect_not_followed"
    assert [item["path"] for item in Handler.posted] == ["/see-other", "/moved"]


def test_post_with_json_and_data_is_refused(server: str) -> None:
    error = failure(http_post, url=f"{server}/echo", json={}, data="x")
    assert error.reason == "invalid_args"
    assert Handler.posted == []


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "127.0.0.1:8080/x", "file:///etc/passwd"])
def test_non_http_urls_are_refused(url: str) -> None:
    error = failure(http_get, url=url)
    assert type(error) is PermanentStepError
    assert error.reason == "invalid_url"


# -- the write boundary for POST -------------------------------------------------------------


def test_post_outside_the_boundary_is_refused_at_compile_time(server: str) -> None:
    boundary = WriteBoundary.from_specs(["http://127.0.0.1:1"])
    steps = [{"id": 1, "tool": "http_post", "args": {"url": f"{server}/echo", "json": {}}}]
    with pytest.raises(PlanError) as caught:
        run(steps, boundary=boundary)
    assert caught.value.codes == ["write_outside_boundary"]
    assert Handler.posted == []


@pytest.mark.parametrize(
    "path", ["/echo", "@evil.example/echo", ".evil.example/echo", "/v1/../echo"]
)
def test_post_outside_the_boundary_is_refused_at_run_time(server: str, path: str) -> None:
    boundary = WriteBoundary.from_specs([f"{server}/v1", "http://127.0.0.1:1"])
    steps = [
        {"id": 1, "tool": "echo", "args": {"value": f"{server}{path}"}},
        {
            "id": 2,
            "tool": "http_post",
            "args": {"url": "<step_1_result>", "json": {"x": 1}},
            "depends_on": [1],
        },
    ]
    record = run(steps, boundary=boundary).steps[2]
    assert (record.status, record.reason, record.attempts) == (
        "failed",
        "write_outside_boundary",
        1,
    )
    assert Handler.posted == []


def test_post_inside_the_boundary_through_a_reference(server: str) -> None:
    steps = [
        {"id": 1, "tool": "echo", "args": {"value": f"{server}/echo"}},
        {
            "id": 2,
            "tool": "http_post",
            "args": {"url": "<step_1_result>", "json": {"x": 1}},
            "depends_on": [1],
        },
    ]
    host = server.removeprefix("http://")
    result = run(steps, boundary=WriteBoundary.from_specs([server]), http_allow=[host])
    assert result.status == "succeeded"
    assert result.steps[2].result["json"] == {"received": '{"x":1}'}
    assert Handler.posted[0]["key"] == "r:2"


# -- the HTTP allow-list ---------------------------------------------------------------------


def test_declarations_for_untrusted_content() -> None:
    for item in (http_get, http_post):
        assert (item.egress, item.taint_source, item.reaches) == (True, True, "url")


def test_a_host_the_plan_names_literally_is_reached(server: str) -> None:
    result = run([get_step(f"{server}/json")])
    assert result.status == "succeeded"
    assert Handler.hits["/json"] == 1


def test_a_host_built_from_a_reference_is_refused_unless_configured(server: str) -> None:
    steps = [
        {"id": 1, "tool": "echo", "args": {"value": f"{server}/json"}},
        {"id": 2, "tool": "http_get", "args": {"url": "<step_1_result>"}},
    ]
    result = run(steps)
    assert result.status == "failed"
    assert result.steps[2].reason == "host_not_allowed"
    assert "--http-allow" in (result.steps[2].detail or "")
    assert Handler.hits.get("/json", 0) == 0
    allowed = run(steps, http_allow=["127.0.0.1"])
    assert allowed.status == "succeeded"
    assert Handler.hits["/json"] == 1


def test_a_post_to_a_host_built_from_a_reference_sends_nothing(server: str) -> None:
    steps = [
        {"id": 1, "tool": "echo", "args": {"value": f"{server}/echo"}},
        {"id": 2, "tool": "http_post", "args": {"url": "<step_1_result>", "json": {"x": 1}}},
    ]
    result = run(steps, boundary=WriteBoundary.from_specs([server]))
    assert (result.status, result.steps[2].reason) == ("failed", "host_not_allowed")
    assert Handler.posted == []


def test_each_redirect_hop_is_checked() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "docs.example.com":
            return httpx.Response(302, headers={"Location": "http://127.0.0.2:8081/collect"})
        return httpx.Response(200, text="collected")

    with use_transport(httpx.MockTransport(handler)):
        result = run([get_step("http://docs.example.com/page")])
    assert result.status == "failed"
    assert result.steps[1].reason == "host_not_allowed"
    assert "127.0.0.2:8081" in (result.steps[1].detail or "")
    assert seen == ["http://docs.example.com/page"]


def test_a_redirect_to_a_configured_host_is_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "docs.example.com":
            return httpx.Response(302, headers={"Location": "https://cdn.example.org/page"})
        return httpx.Response(200, text="moved here")

    with use_transport(httpx.MockTransport(handler)):
        result = run([get_step("http://docs.example.com/page")], http_allow=["*.example.org"])
    assert result.status == "succeeded"
    assert result.steps[1].result["text"] == "moved here"


def test_outside_a_run_no_allow_list_applies_and_an_empty_one_allows_nothing() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="ok")

    async def main(allow: tuple[str, ...] | None) -> Any:
        context = ToolContext(run_id="run", step_id=1, http_allow=allow)
        return await http_get.invoke({"url": "https://a.example/x"}, context)

    with use_transport(httpx.MockTransport(handler)):
        assert anyio.run(main, None)["text"] == "ok"
        with pytest.raises(PermanentStepError) as caught:
            anyio.run(main, ())
    assert caught.value.reason == "host_not_allowed"
    assert "allowed: nothing" in str(caught.value)


# -- httpx.MockTransport ---------------------------------------------------------------------


def test_transport_errors_are_classified() -> None:
    def raiser(error: type[httpx.TransportError]) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            raise error("simulated", request=request)

        return httpx.MockTransport(handler)

    cases = [
        (httpx.ConnectTimeout, NotStartedError, "connect_timeout", True),
        (httpx.ConnectError, NotStartedError, "connect_error", True),
        (httpx.ReadTimeout, TransientStepError, "timeout", False),
        (httpx.WriteTimeout, TransientStepError, "timeout", False),
        (httpx.ReadError, TransientStepError, "network_error", False),
        (httpx.RemoteProtocolError, TransientStepError, "network_error", False),
    ]
    for raised, kind, reason, before_effect in cases:
        with use_transport(raiser(raised)):
            error = failure(http_get, url="http://127.0.0.1/x")
        assert isinstance(error, TransientStepError)
        assert (type(error), error.reason, error.before_effect) == (kind, reason, before_effect)
        assert isinstance(error.__cause__, raised)


def test_the_whole_call_is_bounded_by_timeout() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(10)
        return httpx.Response(200)

    started = time.perf_counter()
    with use_transport(httpx.MockTransport(handler)):
        error = failure(http_get, url="http://127.0.0.1/slow", timeout=0.05)
    assert time.perf_counter() - started < 2
    assert type(error) is TransientStepError
    assert (error.reason, error.before_effect) == ("timeout", False)


def test_an_endless_body_stops_past_max_bytes() -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent < 10_000_000:  # bounded, far past the limit
            sent += 1024
            yield b"y" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless())

    with use_transport(httpx.MockTransport(handler)):
        error = failure(http_get, url="http://127.0.0.1/endless", max_bytes=10_000)
    assert error.reason == "too_large"
    assert sent <= 11 * 1024


def test_retry_after_forms() -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    for headers, expected in [
        ({"Retry-After": "12"}, 12.0),
        ({"Retry-After": "12", "Retry-After-Ms": "1500"}, 1.5),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ]:
        transport = httpx.MockTransport(lambda request, h=headers: httpx.Response(529, headers=h))
        with use_transport(transport):
            error = failure(http_get, url="http://127.0.0.1/x")
        assert isinstance(error, TransientStepError)
        assert (error.reason, error.retry_after) == ("http_529", expected)
    with use_transport(
        httpx.MockTransport(lambda request: httpx.Response(503, headers={"Retry-After": date}))
    ):
        error = failure(http_get, url="http://127.0.0.1/x")
    assert isinstance(error, TransientStepError)
    assert error.retry_after is not None
    assert 27 <= error.retry_after <= 30


def test_headers_are_dropped_on_a_redirect_to_another_origin() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("x-api-key")))
        if request.url.path == "/start":
            return httpx.Response(302, headers={"Location": "/same"})
        if request.url.path == "/same":
            return httpx.Response(302, headers={"Location": "http://127.0.0.1:9/other"})
        return httpx.Response(200, json={"done": True})

    with use_transport(httpx.MockTransport(handler)):
        response = call(http_get, url="http://127.0.0.1/start", headers={"X-Api-Key": "k"})
    assert response["json"] == {"done": True}
    assert seen == [
        ("http://127.0.0.1/start", "k"),
        ("http://127.0.0.1/same", "k"),
        ("http://127.0.0.1:9/other", None),
    ]


def test_redirect_to_another_scheme_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(301, headers={"Location": "ftp://127.0.0.1/x"})

    with use_transport(httpx.MockTransport(handler)):
        error = failure(http_get, url="http://127.0.0.1/x")
    assert (type(error), error.reason) == (PermanentStepError, "invalid_url")


def test_empty_json_body_is_none_and_a_falsy_status_is_still_read() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(204, headers={"Content-Type": "application/json"})

    with use_transport(httpx.MockTransport(handler)):
        response = call(http_get, url="http://127.0.0.1/x")
    assert (response["status"], response["text"], response["json"]) == (204, "", None)
