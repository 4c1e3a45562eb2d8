"""The console in a real headless browser: Debian's ``chromium`` driven by Selenium through
``/usr/bin/chromedriver`` (``chromium-driver``; no driver is downloaded). The console runs
under uvicorn on 127.0.0.1 with the real conversation planner, whose model is the local
Messages API server with scripted replies.

Under CI (``CI=true``) a missing browser fails these tests; elsewhere they are skipped with
how to install it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from plandag.brakes.retry import RetryPolicy
from plandag.conversation import planner_factory, planner_function
from plandag.models import AnthropicClient
from plandag.serve import create_app
from plandag.store import open_store
from plandag.testing import MessagesServer
from tests.serve.conftest import REGISTRY, TOKEN, make_config

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
INSTALL = (
    "the browser tests need Debian's chromium and chromium-driver: "
    "apt-get install -y chromium chromium-driver (as root)"
)
MODEL = "claude-sonnet-4-6"
WAIT_S = 20.0
FEEDBACK = (
    "Não publique no blog público; use o canal interno #finance.\n"
    "E nada de valores acima de R$ 1.000,00 — FEEDBACK-7f3a"
)
LOOK_WIRE: dict[str, Any] = {
    "g": "Find a's score",
    "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}],
    "o": "<step_1_result>",
}
BLOG_WIRE: dict[str, Any] = {
    "g": "Score a and publish it",
    "s": [
        {"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []},
        {
            "i": 2,
            "t": "publish",
            "a": {"channel": "blog", "text": "<step_1_result.score>"},
            "d": [1],
        },
    ],
    "o": "<step_2_result>",
}
FINANCE_WIRE: dict[str, Any] = {
    "g": "Score a and publish it on #finance",
    "s": [
        {"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []},
        {
            "i": 2,
            "t": "publish",
            "a": {"channel": "#finance", "text": "<step_1_result.score>"},
            "d": [1],
        },
    ],
    "o": "<step_2_result>",
}


def without_browser(paths: Sequence[str], ci: bool) -> tuple[str, str] | None:
    """What to do when a path of ``paths`` is not an executable: ``("fail", why)`` under
    CI, ``("skip", why)`` elsewhere; None when every one is there."""
    for path in paths:
        if not os.access(path, os.X_OK):
            return ("fail" if ci else "skip"), f"{path} is missing; {INSTALL}"
    return None


def test_a_missing_browser_fails_under_ci_and_is_skipped_elsewhere(tmp_path: Path) -> None:
    absent = str(tmp_path / "chromedriver")
    assert without_browser([absent], ci=True) == ("fail", f"{absent} is missing; {INSTALL}")
    assert without_browser([absent], ci=False) == ("skip", f"{absent} is missing; {INSTALL}")
    assert "apt-get install -y chromium chromium-driver" in INSTALL
    present = tmp_path / "present"
    present.write_text("#!/bin/sh\n", encoding="utf-8")
    present.chmod(0o755)
    assert without_browser([str(present)], ci=True) is None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    action = without_browser([CHROMIUM, CHROMEDRIVER], os.environ.get("CI") == "true")
    if action is not None:
        what, why = action
        if what == "fail":
            pytest.fail(why)
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # CSP reports land there
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def model() -> Iterator[MessagesServer]:
    with MessagesServer() as server:
        yield server


@pytest.fixture
def console_url(tmp_path: Path, model: MessagesServer) -> Iterator[str]:
    """The console under uvicorn on 127.0.0.1 (a free port), planning with the real
    conversation planner against the local Messages API server."""
    client = AnthropicClient(api_key="test", base_url=model.url)
    factory = planner_factory(client, MODEL, retry=RetryPolicy(retries=0), max_repairs=0)
    planner = planner_function(factory, full_registry=REGISTRY, investigate=True)
    config = make_config(tmp_path, planner, poll_s=0.1, stream_s=30.0, on_close=client.aclose)
    app = create_app(config, TOKEN)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        threading.Event().wait(0.05)
    assert server.started, "the console did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


class MissingElementError(AssertionError):
    """The page has no element of that id (yet: a form just submitted may still be loading)."""


def wait_for(driver: WebDriver, condition: Any, what: str) -> Any:
    """Wait until ``condition(driver)`` is truthy; the live parts of the page are replaced
    by server-sent events meanwhile, so an element found a moment ago may be gone, and a
    submitted form's next page may not have its elements yet."""
    wait = WebDriverWait(
        driver,
        WAIT_S,
        poll_frequency=0.1,
        ignored_exceptions=[StaleElementReferenceException, MissingElementError],
    )
    return wait.until(condition, message=what)


def policy_violations(driver: WebDriver) -> list[str]:
    """The browser's console messages about the Content-Security-Policy (a script or a
    style it refused) since the last call."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]


def text(driver: WebDriver, element_id: str) -> str:
    """The element's text, read in one script call (atomic against live updates)."""
    found = driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.innerText : null;",
        element_id,
    )
    if found is None:
        raise MissingElementError(f"the page has no #{element_id}")
    return str(found)


def texts(driver: WebDriver, selector: str) -> list[str]:
    """The text of every element matching the CSS ``selector``, read in one script call."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText);",
        selector,
    )
    return [str(item) for item in found]


def card_hash(driver: WebDriver) -> str | None:
    found = driver.execute_script(
        "var e = document.getElementById('card'); return e ? e.dataset.hash : null;"
    )
    return str(found) if found else None


@pytest.mark.slow
def test_tick_send_reject_with_feedback_approve_and_see_the_run_finish(
    console_url: str, browser: WebDriver, model: MessagesServer, tmp_path: Path
) -> None:
    for reply in (LOOK_WIRE, BLOG_WIRE, LOOK_WIRE, FINANCE_WIRE):  # investigate, then plan
        model.push_json(reply)

    # The token once, then the name once.
    browser.get(f"{console_url}/?token={TOKEN}")
    wait_for(browser, lambda d: d.find_elements(By.ID, "name"), "the name page")
    browser.find_element(By.ID, "name").send_keys("Ana Souza")
    browser.find_element(By.ID, "save-name").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "plan"), "the new conversation's composer")
    assert browser.find_element(By.ID, "who").text == "deciding as Ana Souza"

    # A new conversation: the Plan box is there from the first message.
    box = browser.find_element(By.ID, "plan")
    assert box.is_selected() is False
    box.click()
    assert box.is_selected() is True
    browser.find_element(By.ID, "message").send_keys("Score a and publish the score")
    browser.find_element(By.ID, "send").click()

    first = wait_for(browser, card_hash, "the first decision card")
    card = text(browser, "card")
    assert "Goal: Score a and publish it (2 steps)" in card
    assert "WRITE: blog" in card
    assert "Estimate:" in card
    assert text(browser, "plan-hash") == first
    assert [line.split("\t")[0] for line in texts(browser, "tr.step")] == ["1", "2"]
    assert browser.find_element(By.ID, "plan").is_selected() is True  # armed, persisted
    # Plan mode investigated with a tool without effects; what it found is in the conversation.
    [found] = texts(browser, ".turn.investigation summary")
    assert found.startswith("investigation: 1 plan(s) asked, 1 call(s)")
    assert "ran 1 of 1 step(s) without effects (lookup)" in found

    # Reject with feedback: it is the person's message, and the planner writes a revision.
    browser.find_element(By.ID, "feedback").send_keys(FEEDBACK)
    browser.find_element(By.ID, "reject").click()
    second = wait_for(
        browser, lambda d: (h := card_hash(d)) is not None and h != first and h, "the revised card"
    )
    assert "WRITE: #finance" in text(browser, "card")
    assert texts(browser, ".turn.person")[-1] == f"person: {FEEDBACK}"
    assert f"Plan {first[:12]} rejected by Ana Souza." in text(browser, "turns")
    assert browser.find_element(By.ID, "plan").is_selected() is True  # still armed

    # The feedback reached the planner verbatim, as the task and as the revision's instruction.
    first_look, _, second_look, revision = model.message_requests
    content = revision.json["messages"][0]["content"]
    assert content.startswith(f"Task:\n{FEEDBACK}\n\n")
    assert (
        "The person's feedback on plan 1 (the instruction for this revision, in full):\n"
        f"{FEEDBACK}\n\n"
    ) in content
    assert "FEEDBACK-7f3a" not in json.dumps(first_look.json, ensure_ascii=False)
    assert FEEDBACK in second_look.json["messages"][0]["content"]

    # Approve: the plan runs in the same conversation, and the page shows it finish.
    browser.find_element(By.ID, "approve").click()
    wait_for(
        browser,
        lambda d: any("succeeded: " in item for item in texts(d, ".turn.pipeline")),
        "the run's end in the conversation",
    )
    turns = text(browser, "turns")
    assert f"Plan {second[:12]} approved by Ana Souza." in turns
    assert "plan mode ended: approved" in turns
    assert browser.find_elements(By.ID, "card") == []
    assert browser.find_element(By.ID, "plan").is_selected() is False
    run_link = browser.find_element(By.CSS_SELECTOR, ".turn.pipeline a")
    run_id = run_link.text.removeprefix("run ")
    assert f'run {run_id} succeeded: "published on #finance"' in turns

    # Its page: the DAG, the Gantt chart, the steps, who approved.
    run_link.click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "gantt"), "the run page's Gantt chart")
    assert text(browser, "run-status") == "succeeded"
    assert text(browser, "run-progress") == "2/2 steps done"
    assert len(texts(browser, "#dag .node")) == 2
    assert len(texts(browser, "#gantt .bar")) == 2
    assert "v1 approved by Ana Souza" in text(browser, "decisions")
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert [(d.decision, d.who) for d in store.decisions(run_id)] == [
            ("asked", None),
            ("approved", "Ana Souza"),
        ]
    assert policy_violations(browser) == []  # the live pages ran with no inline script


@pytest.mark.slow
def test_unticking_the_box_ends_plan_mode_and_takes_the_card_away(
    console_url: str, browser: WebDriver, model: MessagesServer, tmp_path: Path
) -> None:
    for reply in (LOOK_WIRE, BLOG_WIRE):
        model.push_json(reply)
    browser.get(f"{console_url}/?token={TOKEN}")
    wait_for(browser, lambda d: d.find_elements(By.ID, "name"), "the name page")
    browser.find_element(By.ID, "name").send_keys("Bruno")
    browser.find_element(By.ID, "save-name").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "plan"), "the composer")
    browser.find_element(By.ID, "plan").click()
    browser.find_element(By.ID, "message").send_keys("Score a and publish it")
    browser.find_element(By.ID, "send").click()
    wait_for(browser, card_hash, "the decision card")

    browser.find_element(By.ID, "plan").click()  # untick: the page submits the change
    wait_for(
        browser,
        lambda d: "plan mode ended: disarmed" in text(d, "turns"),
        "the end of plan mode",
    )
    assert card_hash(browser) is None
    assert browser.find_element(By.ID, "plan").is_selected() is False
    assert len(model.message_requests) == 2  # nothing planned or run after unticking
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert store.runs() == []
    assert policy_violations(browser) == []
