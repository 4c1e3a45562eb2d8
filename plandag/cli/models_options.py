"""The model options of the commands that call a model (``plan``, ``run``, ``research``,
``exec``, ``extract nfe``, ``extract contracts``, ``serve``, and ``resume``, ``approve``,
``reject`` of a stored run) and the client set-up they
share, written once: ``--provider`` (anthropic unless given), ``--model`` (the provider's
default planner model, :data:`DEFAULT_MODELS`; openai has none), ``--base-url``,
``--executor-model`` and ``exec``'s ``--planner``; the key read from the provider's
variable (:data:`plandag.executors.access.KEY_VARIABLES`) and checked before anything runs
(exit 2 saying what to set).

Importing this module imports typer and nothing else of plandag's; the clients are built
by :func:`model_client` when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from plandag.models import LLMClient

__all__ = [
    "DEFAULT_MODELS",
    "PROVIDERS",
    "BaseUrlAgainOption",
    "BaseUrlOption",
    "ContractsExecutorModelOption",
    "ContractsModelOption",
    "ExecModelOption",
    "ExecProviderOption",
    "ExecUrlOption",
    "ExecutorModelOption",
    "ModelOption",
    "PlannerModelOption",
    "PlannerOption",
    "PlannerUrlOption",
    "ProviderOption",
    "ResearchExecutorModelOption",
    "RunExecutorModelOption",
    "attached_planner_model",
    "has_key",
    "key_variable",
    "model_client",
    "planner_model",
    "require_model_key",
]

PROVIDERS = ("anthropic", "openai")
"""The providers a command can call: Anthropic's Messages API, and OpenAI's chat
completions (or an OpenAI-compatible server at ``--base-url``)."""

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-6"}
"""The planner's model when ``--model`` is not given, by provider (openai has none: local
servers name their own)."""

ProviderOption = Annotated[
    str,
    typer.Option("--provider", metavar="anthropic|openai", help="The model provider."),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", metavar="NAME", help="The model (anthropic: claude-sonnet-4-6)."),
]
PlannerModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", metavar="NAME", help="The planner's model (anthropic: claude-sonnet-4-6)."
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", metavar="URL", help="The provider API's base URL."),
]
BaseUrlAgainOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="The run's model server URL given again with its user and password "
        "(http://<user>:<password>@host/): the run store keeps the URL without them.",
    ),
]
RunExecutorModelOption = Annotated[
    str | None,
    typer.Option(
        "--executor-model",
        metavar="NAME",
        help="The small model of the plan's llm and agent steps that name none and "
        "of the library's routing call (claude-haiku-4-5 with anthropic, --model with "
        "openai; executor_model in the config).",
    ),
]
ResearchExecutorModelOption = Annotated[
    str | None,
    typer.Option(
        "--executor-model",
        metavar="NAME",
        help="The model of the llm steps (anthropic: claude-haiku-4-5; openai: --model).",
    ),
]
ContractsModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="The run's model: the llm steps use it unless --executor-model (or the "
        "executor_model setting) names another.",
    ),
]
ContractsExecutorModelOption = Annotated[
    str | None,
    typer.Option(
        "--executor-model",
        metavar="NAME",
        help="The model of the llm steps (default: setting executor_model, else --model, "
        "else claude-haiku-4-5 with anthropic).",
    ),
]
PlannerOption = Annotated[
    str | None,
    typer.Option(
        "--planner",
        metavar="anthropic|openai",
        help="Attach a planner: the plan runs with no model call; only a step that fails on "
        "an input is shown to the model, whose repair runs for that input. The key comes from "
        "ANTHROPIC_API_KEY (or OPENAI_API_KEY).",
    ),
]
PlannerUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", metavar="URL", help="The planner provider API's base URL."),
]
ExecProviderOption = Annotated[
    str | None,
    typer.Option(
        "--provider",
        metavar="anthropic|openai",
        help="The model provider of the plan's llm and agent steps (default: --planner's, "
        "else anthropic); its key (ANTHROPIC_API_KEY, OPENAI_API_KEY) is checked before "
        "anything runs.",
    ),
]
ExecModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="The model: the planner's with --planner (anthropic: claude-sonnet-4-6); with "
        "--provider openai, also the default of the plan's llm and agent steps.",
    ),
]
ExecUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="The provider API's base URL (the planner's, and the llm and agent steps').",
    ),
]
ExecutorModelOption = Annotated[
    str | None,
    typer.Option(
        "--executor-model",
        metavar="NAME",
        help="The model of llm and agent steps that name none (default: claude-haiku-4-5 "
        "with anthropic, --model with openai).",
    ),
]


def _fail(message: str) -> NoReturn:
    from plandag.cli.common import fail

    fail(message)


def planner_model(provider: str, model: str | None, flag: str = "--provider") -> str:
    """The model a command plans with: ``--model``, else the provider's default
    (:data:`DEFAULT_MODELS`); exits 2 for an unknown provider (``flag`` names the option
    that gave it) or ``openai`` without ``--model``."""
    if provider not in PROVIDERS:
        _fail(f"{flag} {provider!r}: choose anthropic or openai")
    name = model or DEFAULT_MODELS.get(provider)
    if name is None:
        _fail(f"--model is required with {flag} {provider}")
    return name


def key_variable(provider: str) -> str:
    """The environment variable holding ``provider``'s key (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``)."""
    from plandag.executors.access import KEY_VARIABLES

    return KEY_VARIABLES[provider]


def has_key(provider: str) -> bool:
    """Whether ``provider``'s key variable is set (not empty)."""
    import os

    return bool(os.environ.get(key_variable(provider)))


def require_model_key(provider: str, base_url: str | None) -> str | None:
    """``provider``'s key, read before anything runs (an OpenAI-compatible server at
    ``base_url`` needs none); exits 2 saying which variable to set when it is missing
    (:func:`plandag.executors.access.require_key`)."""
    from plandag.errors import InputError
    from plandag.executors.access import require_key

    try:
        return require_key(provider, base_url)
    except InputError as error:
        _fail(str(error))


def model_client(provider: str, base_url: str | None) -> LLMClient:
    """The provider's client (``max_retries=0``: plandag's retry policy decides), its key
    checked first: a missing key exits 2 here, before anything runs."""
    from plandag.executors.access import provider_client

    return provider_client(provider, base_url, require_model_key(provider, base_url))


def attached_planner_model(
    planner: str | None, model: str | None, base_url: str | None, save_repairs: Path | None
) -> str | None:
    """``--planner`` (``exec``, ``extract nfe``) checked with the options it takes: the
    planner's model (:func:`planner_model`), or None without ``--planner``; exits 2 when
    ``--model``, ``--base-url`` or ``--save-repairs`` is given without it, or
    ``--save-repairs`` names something that is not a folder."""
    if planner is None:
        given = [
            flag
            for flag, value in (
                ("--model", model),
                ("--base-url", base_url),
                ("--save-repairs", save_repairs),
            )
            if value is not None
        ]
        if given:
            _fail(f"{', '.join(given)} needs --planner anthropic|openai")
        return None
    name = planner_model(planner, model, "--planner")
    if save_repairs is not None and save_repairs.exists() and not save_repairs.is_dir():
        _fail(f"--save-repairs {save_repairs} is not a folder")
    return name
