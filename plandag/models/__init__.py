"""The model layer: provider clients, prices, usage and reservations, token counting.

It sits below the scheduler, the executors and the planner and imports none of them.

* the provider interface: :class:`LLMRequest`, :class:`LLMResponse`, :class:`Usage`,
  :class:`LLMClient`, :class:`LLMStream` (:mod:`plandag.models.base`, which also holds
  the table of how failures map to plandag's step errors);
* two clients on the official SDKs, both with ``max_retries=0``: :class:`AnthropicClient`
  (``anthropic``) and :class:`OpenAICompatibleClient` (``openai``: OpenAI, vLLM, Ollama,
  llama.cpp);
* structured output: :func:`prepare_schema` shapes a JSON Schema for a provider's rules
  and brings the answer back (:class:`PreparedSchema`), :func:`strict_problems` checks a
  schema against them (:mod:`plandag.models.schemas`); a server that refuses a mode gets
  the next one (:mod:`plandag.models.structured`);
* costs: :class:`PriceTable`, :class:`ModelPrice`, :data:`DEFAULT_PRICES`;
* the brakes: :func:`call_with_retries` (retries per a ``RetryPolicy``, budget reserved
  before and settled after each attempt, a :class:`CallRecord` per attempt).

The provider SDKs are imported when a client is built, so importing this package is cheap.
"""

from plandag.models.anthropic import AnthropicClient as AnthropicClient
from plandag.models.base import BudgetRefusedError as BudgetRefusedError
from plandag.models.base import ChatMessage as ChatMessage
from plandag.models.base import DeadlineReachedError as DeadlineReachedError
from plandag.models.base import LLMClient as LLMClient
from plandag.models.base import LLMRequest as LLMRequest
from plandag.models.base import LLMResponse as LLMResponse
from plandag.models.base import LLMStream as LLMStream
from plandag.models.base import MissingAPIKeyError as MissingAPIKeyError
from plandag.models.base import ModelRefusalError as ModelRefusalError
from plandag.models.base import PromptCache as PromptCache
from plandag.models.base import TruncatedResponseError as TruncatedResponseError
from plandag.models.base import UnpricedModelError as UnpricedModelError
from plandag.models.base import UnusableResponseError as UnusableResponseError
from plandag.models.base import Usage as Usage
from plandag.models.base import check_stop_reason as check_stop_reason
from plandag.models.base import estimate_input_tokens as estimate_input_tokens
from plandag.models.calls import CallRecord as CallRecord
from plandag.models.calls import call_with_retries as call_with_retries
from plandag.models.calls import estimate_cost as estimate_cost
from plandag.models.openai import OpenAICompatibleClient as OpenAICompatibleClient
from plandag.models.pricing import DEFAULT_PRICES as DEFAULT_PRICES
from plandag.models.pricing import CatalogPrice as CatalogPrice
from plandag.models.pricing import ModelPrice as ModelPrice
from plandag.models.pricing import Price as Price
from plandag.models.pricing import PriceTable as PriceTable
from plandag.models.pricing import configure_prices as configure_prices
from plandag.models.schemas import PreparedSchema as PreparedSchema
from plandag.models.schemas import prepare_schema as prepare_schema
from plandag.models.schemas import strict_problems as strict_problems

__all__ = [
    "DEFAULT_PRICES",
    "AnthropicClient",
    "BudgetRefusedError",
    "CallRecord",
    "CatalogPrice",
    "ChatMessage",
    "DeadlineReachedError",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "LLMStream",
    "MissingAPIKeyError",
    "ModelPrice",
    "ModelRefusalError",
    "OpenAICompatibleClient",
    "PreparedSchema",
    "Price",
    "PriceTable",
    "PromptCache",
    "TruncatedResponseError",
    "UnpricedModelError",
    "UnusableResponseError",
    "Usage",
    "call_with_retries",
    "check_stop_reason",
    "configure_prices",
    "estimate_cost",
    "estimate_input_tokens",
    "prepare_schema",
    "strict_problems",
]
