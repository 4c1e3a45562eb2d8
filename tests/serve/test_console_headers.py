"""The console answers only to the host names it was given (a page of another site that
resolves its own name to 127.0.0.1 gets 400: DNS rebinding), and every response forbids
framing, referrers and inline scripts; the pages hold no inline script at all."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from plandag.serve import create_app
from tests.serve.conftest import (
    BASE,
    PUBLISH_PLAN,
    TOKEN,
    Clock,
    ScriptedPlanner,
    make_config,
    signed_in,
)
from tests.serve.test_console_http import card_hash, eventually, start


def directives(policy: str) -> dict[str, list[str]]:
    """A Content-Security-Policy as ``{directive: [sources]}``."""
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        words = part.split()
        if words:
            parsed[words[0]] = words[1:]
    return parsed


def assert_safe_headers(headers: dict[str, str] | object) -> None:
    assert headers["referrer-policy"] == "no-referrer"  # type: ignore[index]
    assert headers["x-frame-options"] == "DENY"  # type: ignore[index]
    assert headers["x-content-type-options"] == "nosniff"  # type: ignore[index]
    policy = directives(headers["content-security-policy"])  # type: ignore[index]
    assert policy["script-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    for sources in policy.values():
        assert "'unsafe-eval'" not in sources
    assert "'unsafe-inline'" not in policy["script-src"]


class ScriptFinder(html.parser.HTMLParser):
    """Collects what would run as inline script: ``<script>`` with a body or without
    ``src``, ``on...=`` attributes and ``javascript:`` URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self.sources: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self._in_script = True
            if named.get("src"):
                self.sources.append(str(named["src"]))
            else:
                self.inline.append("<script> without src")
        for name, value in attrs:
            if name.startswith("on"):
                self.inline.append(f"{tag} {name}={value!r}")
            if value and value.strip().lower().startswith("javascript:"):
                self.inline.append(f"{tag} {name}={value!r}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(f"script body {data.strip()[:40]!r}")


def scripts_of(page: str) -> ScriptFinder:
    finder = ScriptFinder()
    finder.feed(page)
    return finder


@pytest.fixture
def app(tmp_path: Path) -> object:
    return create_app(make_config(tmp_path, ScriptedPlanner(), clock=Clock()), TOKEN)


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.", "0.0.0.0"],
)
def test_a_request_naming_another_host_gets_400(app: object, host: str) -> None:
    client = TestClient(app, base_url=BASE)  # type: ignore[arg-type]
    answer = client.get(f"/?token={TOKEN}", headers={"host": host}, follow_redirects=False)
    assert answer.status_code == 400
    assert "set-cookie" not in answer.headers  # the token was not taken
    assert_safe_headers(answer.headers)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8765", "localhost", "LOCALHOST:8765", "[::1]:8765"]
)
def test_the_loopback_names_are_answered(app: object, host: str) -> None:
    client = TestClient(app, base_url=BASE)  # type: ignore[arg-type]
    answer = client.get(f"/?token={TOKEN}", headers={"host": host}, follow_redirects=False)
    assert answer.status_code == 303
    assert "plandag_token=" in answer.headers["set-cookie"]


def test_names_given_are_answered_too(tmp_path: Path) -> None:
    app = create_app(
        make_config(tmp_path, ScriptedPlanner()),
        TOKEN,
        allowed_hosts=["console.example.org", "::1", "10.0.0.5"],
    )
    client = TestClient(app, base_url=BASE)
    for host in ("console.example.org", "console.example.org:8765", "10.0.0.5", "[::1]"):
        answer = client.get(f"/?token={TOKEN}", headers={"host": host}, follow_redirects=False)
        assert answer.status_code == 303, host
    answer = client.get(f"/?token={TOKEN}", headers={"host": "10.0.0.6"}, follow_redirects=False)
    assert answer.status_code == 400


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        ("console.example.org:8765", "without a port"),
        ("a*b.example", "'*'"),
        ("http://console.example.org", "a host name"),
    ],
)
def test_a_name_that_can_never_match_is_refused(tmp_path: Path, name: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        create_app(make_config(tmp_path, ScriptedPlanner()), TOKEN, allowed_hosts=[name])


def test_every_response_carries_the_headers_and_no_page_runs_an_inline_script(
    tmp_path: Path,
) -> None:
    planner = ScriptedPlanner(PUBLISH_PLAN)
    app = create_app(make_config(tmp_path, planner, clock=Clock()), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        unauthorized = TestClient(app, base_url=BASE).get("/conversations")
        assert unauthorized.status_code == 401
        assert_safe_headers(unauthorized.headers)
        csrf = signed_in(client)
        path = start(client, csrf)
        digest = card_hash(eventually(client, path, lambda text: 'id="card"' in text))
        refused = client.post(
            f"{path}/decide", data={"csrf": csrf, "hash": "0" * 64, "action": "approve"}
        )
        assert refused.status_code == 400  # the problem page: a plan hash that is not the card's
        approved = client.post(
            f"{path}/decide",
            data={"csrf": csrf, "hash": digest, "action": "approve"},
            follow_redirects=False,
        )
        assert approved.status_code == 303
        assert_safe_headers(approved.headers)
        page = eventually(client, path, lambda text: 'href="/runs/' in text)
        run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
        pages = {
            "name": client.get("/name"),
            "conversations": client.get("/conversations"),
            "conversation": client.get(path),
            "runs": client.get("/runs"),
            "run": client.get(f"/runs/{run_id}"),
            "inbox": client.get("/inbox"),
            "problem": refused,
        }
        script = client.get("/static/console.js")
        with client.stream("GET", f"/runs/{run_id}/events") as events:
            assert events.status_code == 200
            assert_safe_headers(events.headers)
    for name, answer in pages.items():
        assert answer.status_code in (200, 400), name
        assert_safe_headers(answer.headers)
        found = scripts_of(answer.text)
        assert found.inline == [], name
        assert found.sources == ["/static/console.js"], name
    assert script.status_code == 200
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert_safe_headers(script.headers)
    assert "EventSource" in script.text
    assert "data-back" in pages["problem"].text


def test_the_static_script_needs_the_token_too(app: object) -> None:
    answer = TestClient(app, base_url=BASE).get("/static/console.js")  # type: ignore[arg-type]
    assert answer.status_code == 401
