"""The console against requests a person did not mean to send: every route behind the
token, every POST behind its CSRF value, ids that do not exist, hostile text."""

from __future__ import annotations

import re
import time

from starlette.routing import Route
from starlette.testclient import TestClient

from tests.serve.conftest import BASE, PUBLISH_PLAN, TOKEN, ScriptedPlanner, signed_in

SCRIPT = "<script>alert('x')</script>"


def concrete(path: str) -> str:
    """A route's path with every ``{param}`` replaced by an id no store holds."""
    return re.sub(r"\{[^}]+\}", "0f0f0f0f0f0f0f0f", path)


def routes(client: TestClient, method: str) -> list[str]:
    found = [
        concrete(route.path)
        for route in client.app.routes  # type: ignore[attr-defined]
        if isinstance(route, Route) and route.methods is not None and method in route.methods
    ]
    assert found, method
    return found


def test_every_route_answers_401_without_the_token(console_client: TestClient) -> None:
    posts = routes(console_client, "POST")
    assert len(posts) == 7  # /inbox/{id}/{action} is one route
    for path in routes(console_client, "GET"):
        assert console_client.get(path, follow_redirects=False).status_code == 401, path
    for path in posts:
        response = console_client.post(path, data={"csrf": "x"}, follow_redirects=False)
        assert response.status_code == 401, path
        assert "open the address `plandag serve` printed" in response.text


def test_every_post_route_answers_403_without_its_csrf_value(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    signed_in(console_client)
    for path in routes(console_client, "POST"):
        for given in ({}, {"csrf": "wrong"}):
            response = console_client.post(
                path, data={"text": "x", "action": "approve", **given}, follow_redirects=False
            )
            assert response.status_code == 403, (path, given)
            assert "CSRF token is missing or wrong" in response.text
    assert planner.calls == []


def test_a_cross_site_post_carries_no_cookie_and_is_refused(console_client: TestClient) -> None:
    signed_in(console_client)
    other_site = TestClient(console_client.app, base_url=BASE)
    response = other_site.post(
        "/conversations",
        data={"text": "x"},
        headers={"origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert response.status_code == 401


def test_ids_that_do_not_exist_are_404_with_a_sentence(console_client: TestClient) -> None:
    csrf = signed_in(console_client)
    missing = "0f0f0f0f0f0f0f0f"
    for path in (f"/conversations/{missing}", f"/conversations/{missing}/events"):
        response = console_client.get(path)
        assert response.status_code == 404, path
        assert response.text == (
            f"no conversation '{missing}' in this console's store; /conversations lists them"
        )
    for path in (f"/runs/{missing}", f"/runs/{missing}/events"):
        response = console_client.get(path)
        assert response.status_code == 404, path
        assert response.text.startswith(f"no run '{missing}' in ")
    for action in ("send", "mode", "decide"):
        response = console_client.post(
            f"/conversations/{missing}/{action}",
            data={"csrf": csrf, "text": "x", "action": "approve"},
        )
        assert response.status_code == 404, action
    for action in ("resume", "approve", "abandon"):
        response = console_client.post(f"/inbox/{missing}/{action}", data={"csrf": csrf})
        assert response.status_code == 404, action
    response = console_client.post(f"/runs/{missing}/decide", data={"csrf": csrf})
    assert response.status_code == 404
    assert "Traceback" not in response.text


def test_a_name_is_escaped_wherever_it_is_shown(console_client: TestClient) -> None:
    signed_in(console_client, name=SCRIPT)
    page = console_client.get("/conversations").text
    assert SCRIPT not in page
    assert "deciding as &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page


def test_a_token_in_the_address_of_a_later_request_only_works_when_right(
    console_client: TestClient,
) -> None:
    signed_in(console_client)
    assert console_client.get("/runs?token=wrong", follow_redirects=False).status_code == 200
    console_client.cookies.clear()
    assert console_client.get("/runs?token=wrong", follow_redirects=False).status_code == 401
    again = console_client.get(f"/runs?token={TOKEN}", follow_redirects=False)
    assert (again.status_code, again.headers["location"]) == (303, "/runs")


def test_edited_arguments_nested_past_the_parser_are_a_400_not_a_500(
    console_client: TestClient, planner: ScriptedPlanner
) -> None:
    planner.answers.append(PUBLISH_PLAN)
    csrf = signed_in(console_client)
    started = console_client.post(
        "/conversations",
        data={"csrf": csrf, "text": "score a", "plan_box": "1", "plan": "on"},
        follow_redirects=False,
    )
    path = started.headers["location"]
    page = ""
    for _ in range(200):  # the turn runs in the background: at most 10 s
        page = console_client.get(path).text
        if 'id="card"' in page:
            break
        time.sleep(0.05)
    found = re.search(r'name="hash" value="([0-9a-f]{64})"', page)
    assert found is not None, page
    nested = "[" * 100_000 + "]" * 100_000
    response = console_client.post(
        f"{path}/decide",
        data={
            "csrf": csrf,
            "hash": found.group(1),
            "action": "approve",
            "step_1": "edit",
            "args_1": '{"name": ' + nested + "}",
        },
    )
    assert response.status_code == 400
    assert "step 1: the edited arguments are not JSON (nested too deeply)" in response.text
    assert 'id="card"' in console_client.get(path).text  # still waiting for a decision
