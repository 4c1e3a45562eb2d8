"""The public API is what ``plandag.__all__`` says, and nothing is missing from it."""

import subprocess
import sys

import pytest

import plandag


def test_all_names_exist() -> None:
    missing = [name for name in plandag.__all__ if not hasattr(plandag, name)]
    assert missing == []


def test_all_is_sorted_and_unique() -> None:
    assert list(plandag.__all__) == sorted(set(plandag.__all__))


def test_every_public_import_is_listed() -> None:
    for name in plandag.__all__:  # public names are imported on first use
        getattr(plandag, name)
    public = {
        name
        for name, value in vars(plandag).items()
        if not name.startswith("_") and not isinstance(value, type(plandag))
    }
    assert public == set(plandag.__all__) - {"__version__"}


def test_user_facing_imports() -> None:
    from plandag import ToolContext, tool

    @tool
    def double(x: int) -> int:
        return 2 * x

    assert double.name == "double"
    assert ToolContext(run_id="r", step_id=3).idempotency_key == "r:3"


def test_dir_lists_every_public_name() -> None:
    assert set(plandag.__all__) <= set(dir(plandag))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'compile'"):
        plandag.compile  # noqa: B018


def test_importing_the_package_imports_none_of_its_parts() -> None:
    code = "import sys, plandag; print(sorted(m for m in sys.modules if m.startswith('plandag.')))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert loaded == "['plandag.lazy']"


def test_the_agent_its_clients_and_model_access_are_exported() -> None:
    from plandag.api import Agent
    from plandag.executors.access import ModelAccess
    from plandag.models import AnthropicClient, OpenAICompatibleClient
    from plandag.planner import agent
    from plandag.planner.agent import AgentResult

    assert plandag.Agent is Agent
    assert issubclass(Agent, agent.Agent)  # the planner's, with plain functions as hooks
    assert plandag.AgentResult is AgentResult
    assert plandag.AnthropicClient is AnthropicClient
    assert plandag.OpenAICompatibleClient is OpenAICompatibleClient
    assert plandag.ModelAccess is ModelAccess
    assert {
        "Agent",
        "AgentResult",
        "AnthropicClient",
        "ModelAccess",
        "OpenAICompatibleClient",
    } <= set(plandag.__all__)
