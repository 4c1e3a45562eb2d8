"""An OpenAI-compatible chat completion's answer read as Messages API content blocks
(``text`` and ``tool_use``), the one shape the ReAct loop, the agent step and the
telemetry's output messages read from both providers. A leaf: it imports no client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["content_blocks"]


def content_blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat completion's answer as Messages API content blocks: its text as a ``text``
    block, each of its ``tool_calls`` as a ``tool_use`` block (``arguments`` decoded; an
    argument text that is not a JSON object gives ``{"_invalid_arguments": text}``, which no
    tool's schema accepts, so the call becomes an error the model reads).

    Args:
        body: the decoded chat completion (an :class:`~plandag.models.LLMResponse`'s
            ``raw``).

    Returns:
        The blocks, text first.
    """
    choices = body.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
    if not isinstance(message, Mapping):
        return []
    blocks: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = {}
        arguments = function.get("arguments", "{}")
        try:
            given = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            given = None
        if not isinstance(given, dict):
            given = {"_invalid_arguments": arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(function.get("name", "")),
                "input": given,
            }
        )
    return blocks
