"""A web search tool to plug into ``plandag research`` (README, "Research over a corpus").

plandag ships no web search: a user brings the search API of their choice as a tool. This
one asks a JSON search API (replace ``SEARCH_URL`` and the fields read below with your
provider's) through plandag's ``http_get``, so every request is held to the run's HTTP
allow-list: a host that ``--http-allow`` does not list is refused before anything is sent
(reason ``host_not_allowed``)::

    plandag research "QUESTION" --corpus examples/research/corpus \\
        --tools examples/research/web_search.py --http-allow api.search.example

The results are tainted (they come from outside) and are not corpus chunks: citations are
checked against the corpus only, so a planner uses them to choose what to search for.
"""

from __future__ import annotations

from typing import Any

from plandag import ToolContext, tool
from plandag.tools.http import http_get

SEARCH_URL = "https://api.search.example/v1/search"


@tool(egress=True, taint_source=True, typical_seconds=1.0, timeout=30.0)
async def web_search(query: str, ctx: ToolContext, k: int = 5) -> dict[str, Any]:
    """Search the web: the first k results for the query, as title, URL and snippet."""
    response = await http_get.function(
        SEARCH_URL, params={"q": query, "count": str(k)}, timeout=20.0, ctx=ctx
    )
    found = response["json"] if isinstance(response["json"], dict) else {}
    results = [
        {"title": item.get("title"), "url": item.get("url"), "snippet": item.get("snippet")}
        for item in found.get("results", [])[:k]
        if isinstance(item, dict)
    ]
    return {"query": query, "results": results}
