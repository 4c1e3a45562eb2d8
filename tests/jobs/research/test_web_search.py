"""The web search example is a tool a user plugs in with --tools; its requests stay
within the HTTP allow-list (no network: an httpx mock transport answers)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from plandag.errors import PermanentStepError
from plandag.jobs.research.planning import research_registry
from plandag.tools.base import ToolContext
from plandag.tools.http import use_transport

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "research" / "web_search.py"


def answer(request: httpx.Request) -> httpx.Response:
    assert request.url.host == "api.search.example"
    assert request.url.params["q"] == "federalist faction"
    return httpx.Response(
        200,
        json={"results": [{"title": "No. 10", "url": "https://example.org/10", "snippet": "s"}]},
    )


@pytest.mark.anyio
async def test_web_search_reaches_only_the_allowed_host() -> None:
    registry = research_registry()
    assert registry.load_file(EXAMPLE) == ["web_search"]
    web_search = registry.tools["web_search"]
    assert (web_search.egress, web_search.taint_source, web_search.effects) == (True, True, "none")
    allowed = ToolContext(run_id="r", step_id=1, http_allow=("api.search.example",))
    with use_transport(httpx.MockTransport(answer)):
        found = await web_search.invoke({"query": "federalist faction", "k": 3}, allowed)
        assert found == {
            "query": "federalist faction",
            "results": [{"title": "No. 10", "url": "https://example.org/10", "snippet": "s"}],
        }
        refused = ToolContext(run_id="r", step_id=1, http_allow=())
        with pytest.raises(PermanentStepError) as caught:
            await web_search.invoke({"query": "federalist faction"}, refused)
    assert caught.value.reason == "host_not_allowed"
