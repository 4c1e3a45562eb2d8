"""A local Anthropic Messages API server for tests and offline use.

:class:`MessagesServer` speaks the Messages API over real HTTP on 127.0.0.1 (JSON replies,
server-sent events, error bodies, 429/529 with their headers), plays the replies a test
queued in a :class:`Script`, records every request in :attr:`MessagesServer.requests`, and
can simulate latency. The official SDK works against it unchanged::

    from plandag.testing import MessagesServer

    with MessagesServer(ttft=0.0) as server:
        server.push_text("Hello")
        client = anthropic.Anthropic(api_key="test", base_url=server.url, max_retries=0)
        client.messages.create(model="any", max_tokens=64, messages=[...])

:class:`ChatCompletionsServer` plays the same scripts as OpenAI-compatible chat completions
(JSON and server-sent events with usage), for :class:`~plandag.models.OpenAICompatibleClient`.

:class:`SchemaFollower` is a stand-in model that answers every structured-output request
with a random instance of the schema it is sent (``MessagesServer(default=SchemaFollower(7))``).

Stand-in models for contract extraction answer from CUAD-shaped labels through either
server: :class:`PerfectContractsModel` (the labelled clauses, values read from their
passages) and :class:`AdversarialContractsModel` (a set share of those answers altered:
changed values, fabricated quotes, one- or two-word quotes, shifted windows and offsets).

From a shell: ``python -m plandag.testing --port 8767 --script replies.jsonl``.
"""

from plandag.testing.contracts import ALTERATION_KINDS as ALTERATION_KINDS
from plandag.testing.contracts import AdversarialContractsModel as AdversarialContractsModel
from plandag.testing.contracts import Alteration as Alteration
from plandag.testing.contracts import PerfectContractsModel as PerfectContractsModel
from plandag.testing.openai_server import ChatCompletionsServer as ChatCompletionsServer
from plandag.testing.schema_model import SchemaFollower as SchemaFollower
from plandag.testing.schema_model import random_instance as random_instance
from plandag.testing.script import Reply as Reply
from plandag.testing.script import Responder as Responder
from plandag.testing.script import Script as Script
from plandag.testing.script import ScriptedResponse as ScriptedResponse
from plandag.testing.script import estimate_tokens as estimate_tokens
from plandag.testing.script import schema_text as schema_text
from plandag.testing.server import MessagesServer as MessagesServer
from plandag.testing.server import RecordedRequest as RecordedRequest
from plandag.testing.server import system_text as system_text

__all__ = [
    "ALTERATION_KINDS",
    "AdversarialContractsModel",
    "Alteration",
    "ChatCompletionsServer",
    "MessagesServer",
    "PerfectContractsModel",
    "RecordedRequest",
    "Reply",
    "Responder",
    "SchemaFollower",
    "Script",
    "ScriptedResponse",
    "estimate_tokens",
    "random_instance",
    "schema_text",
    "system_text",
]
