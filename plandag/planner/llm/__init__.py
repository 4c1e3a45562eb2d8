"""Model clients for the planner.

* the provider interface: :class:`LLMRequest`, :class:`LLMResponse`, :class:`Usage`,
  :class:`LLMClient`, :class:`LLMStream` (:mod:`plandag.planner.llm.base`, which also holds
  the table of how failures map to plandag's step errors);
* two clients: :class:`AnthropicClient` (the official SDK, ``max_retries=0``) and
  :class:`OpenAICompatibleClient` (chat completions over httpx, for vLLM, Ollama,
  llama.cpp);
* costs: :class:`PriceTable`, :class:`ModelPrice`, :data:`DEFAULT_PRICES`;
* the brakes: :func:`call_with_retries` (retries per a ``RetryPolicy``, budget reserved
  before and settled after each attempt, a :class:`CallRecord` per attempt).

The provider SDKs are imported when a client is built, so importing this package is cheap.
"""

from plandag.planner.llm.anthropic import AnthropicClient as AnthropicClient
from plandag.planner.llm.base import BudgetRefusedError as BudgetRefusedError
from plandag.planner.llm.base import ChatMessage as ChatMessage
from plandag.planner.llm.base import DeadlineReachedError as DeadlineReachedError
from plandag.planner.llm.base import LLMClient as LLMClient
from plandag.planner.llm.base import LLMRequest as LLMRequest
from plandag.planner.llm.base import LLMResponse as LLMResponse
from plandag.planner.llm.base import LLMStream as LLMStream
from plandag.planner.llm.base import MissingAPIKeyError as MissingAPIKeyError
from plandag.planner.llm.base import ModelRefusalError as ModelRefusalError
from plandag.planner.llm.base import PromptCache as PromptCache
from plandag.planner.llm.base import TruncatedResponseError as TruncatedResponseError
from plandag.planner.llm.base import UnpricedModelError as UnpricedModelError
from plandag.planner.llm.base import UnusableResponseError as UnusableResponseError
from plandag.planner.llm.base import Usage as Usage
from plandag.planner.llm.base import check_stop_reason as check_stop_reason
from plandag.planner.llm.base import estimate_input_tokens as estimate_input_tokens
from plandag.planner.llm.calls import CallRecord as CallRecord
from plandag.planner.llm.calls import call_with_retries as call_with_retries
from plandag.planner.llm.calls import estimate_cost as estimate_cost
from plandag.planner.llm.openai import OpenAICompatibleClient as OpenAICompatibleClient
from plandag.planner.llm.pricing import DEFAULT_PRICES as DEFAULT_PRICES
from plandag.planner.llm.pricing import ModelPrice as ModelPrice
from plandag.planner.llm.pricing import PriceTable as PriceTable

__all__ = [
    "DEFAULT_PRICES",
    "AnthropicClient",
    "BudgetRefusedError",
    "CallRecord",
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
    "PriceTable",
    "PromptCache",
    "TruncatedResponseError",
    "UnpricedModelError",
    "UnusableResponseError",
    "Usage",
    "call_with_retries",
    "check_stop_reason",
    "estimate_cost",
    "estimate_input_tokens",
]
