"""The model options of the commands that call a model (``plan``, ``run``, ``research``,
``exec``, ``extract nfe``, ``extract contracts``, ``serve``, and ``resume``, ``approve``,
``reject`` of a stored run) and the client set-up they
share, written once: ``--provider`` (anthropic unless given), ``--offline`` (the same as
``--provider offline``: the offline model of :mod:`plandag.testing.offline`, answers built
from the request's own documents, no key, no network), ``--model`` (the provider's
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
    from plandag.tools.registry import Registry

__all__ = [
    "DEFAULT_MODELS",
    "OFFLINE",
    "OFFLINE_MODEL",
    "OFFLINE_NOTE",
    "OFFLINE_SUMMARY",
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
    "OfflineOption",
    "PlannerModelOption",
    "PlannerOption",
    "PlannerUrlOption",
    "ProviderOption",
    "ResearchExecutorModelOption",
    "RunExecutorModelOption",
    "attached_planner_model",
    "executor_for",
    "has_key",
    "key_variable",
    "model_client",
    "offline_provider",
    "planner_model",
    "print_offline_note",
    "require_model_key",
]

PROVIDERS = ("anthropic", "openai", "offline")
"""The providers a command can call: Anthropic's Messages API, OpenAI's chat completions
(or an OpenAI-compatible server at ``--base-url``), and the offline model (in the process:
extracts of the request's own documents; :mod:`plandag.testing.offline`)."""

OFFLINE = "offline"
"""The offline model's provider name (``--offline``, ``--provider offline``)."""

OFFLINE_MODEL = "offline-extractive"
"""The offline model's name, in every record of an offline run
(:data:`plandag.models.offline.OFFLINE_MODEL`)."""

OFFLINE_NOTE = (
    "offline: no model is called; every answer is an extract of the request's own documents "
    f"({OFFLINE_MODEL}), not a model's"
)
"""The line an offline command prints on stderr before it starts."""

OFFLINE_SUMMARY = f"offline ({OFFLINE_MODEL}): the answers are extracts, not a model's"
"""What an offline command's summary line adds."""

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-6", OFFLINE: OFFLINE_MODEL}
"""The planner's model when ``--model`` is not given, by provider (openai has none: local
servers name their own)."""

ProviderOption = Annotated[
    str,
    typer.Option("--provider", metavar="anthropic|openai|offline", help="The model provider."),
]
OfflineOption = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Answer every model request offline with extracts of the request's own documents "
        "(no key, no network; labelled offline-extractive in every output). Same as "
        "--provider offline.",
    ),
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
        metavar="anthropic|openai|offline",
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


def offline_provider(provider: str, offline: bool, base_url: str | None = None) -> str:
    """The provider a command calls once ``--offline`` is read: ``offline`` with
    ``--offline``, else ``provider`` as given; exits 2 for ``--offline`` with another
    ``--provider`` than the default (anthropic) or with ``--base-url``, and for
    ``--provider offline`` with ``--base-url`` (the offline model is in the process)."""
    if offline:
        if provider not in ("anthropic", OFFLINE):
            _fail(f"--offline is --provider offline: leave out --provider {provider}")
        provider = OFFLINE
    if provider == OFFLINE and base_url is not None:
        _fail("--offline needs no --base-url: the offline model runs in the process")
    return provider


def print_offline_note() -> None:
    """Print :data:`OFFLINE_NOTE` on stderr (an offline command, before it starts)."""
    import sys

    sys.stderr.write(OFFLINE_NOTE + "\n")


def planner_model(
    provider: str, model: str | None, flag: str = "--provider", executor_model: str | None = None
) -> str:
    """The model a command plans with: ``--model``, else the provider's default
    (:data:`DEFAULT_MODELS`); exits 2 for an unknown provider (``flag`` names the option
    that gave it), ``openai`` without ``--model``, or ``offline`` with a ``--model``
    (or ``executor_model``, the command's ``--executor-model``) other than
    :data:`OFFLINE_MODEL`."""
    if provider not in PROVIDERS:
        _fail(f"{flag} {provider!r}: choose anthropic, openai or offline")
    if provider == OFFLINE and model not in (None, OFFLINE_MODEL):
        _fail(f"--model {model}: the offline model is {OFFLINE_MODEL}; leave out --model")
    if provider == OFFLINE and executor_model not in (None, OFFLINE_MODEL):
        _fail(
            f"--executor-model {executor_model}: the offline model is {OFFLINE_MODEL}; leave "
            "out --executor-model"
        )
    name = model or DEFAULT_MODELS.get(provider)
    if name is None:
        _fail(f"--model is required with {flag} {provider}")
    return name


def executor_for(provider: str, model: str, executor_model: str | None) -> str:
    """The model of a run's ``llm`` and ``agent`` steps:
    :func:`plandag.executors.access.executor_model_for`, or :data:`OFFLINE_MODEL` for the
    offline model (a configured ``executor_model`` does not apply to it); exits 2 when
    there is none."""
    from plandag.errors import InputError
    from plandag.executors.access import executor_model_for

    if provider == OFFLINE:
        return OFFLINE_MODEL
    try:
        return executor_model_for(provider, model, executor_model)
    except InputError as error:
        _fail(str(error))


def key_variable(provider: str) -> str:
    """The environment variable holding ``provider``'s key (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``)."""
    from plandag.executors.access import KEY_VARIABLES

    return KEY_VARIABLES[provider]


def has_key(provider: str) -> bool:
    """Whether ``provider``'s key variable is set (not empty); always True for the offline
    model, which needs none."""
    import os

    if provider == OFFLINE:
        return True
    return bool(os.environ.get(key_variable(provider)))


OFFLINE_HINT = "; or --offline to try it with no key (extracts of your own files, labelled offline)"
"""What a missing-key error adds on a command that has ``--offline``."""


def require_model_key(
    provider: str, base_url: str | None, *, offline_hint: bool = True
) -> str | None:
    """``provider``'s key, read before anything runs (an OpenAI-compatible server at
    ``base_url`` needs none); exits 2 saying which variable to set when it is missing
    (:func:`plandag.executors.access.require_key`), and, with ``offline_hint`` (a command
    that has ``--offline``), that ``--offline`` needs none; the offline model needs none."""
    from plandag.errors import InputError
    from plandag.executors.access import require_key
    from plandag.models.base import MissingAPIKeyError

    if provider == OFFLINE:
        return None
    try:
        return require_key(provider, base_url)
    except MissingAPIKeyError as error:
        _fail(f"{error}{OFFLINE_HINT}" if offline_hint else str(error))
    except InputError as error:
        _fail(str(error))


def model_client(
    provider: str,
    base_url: str | None,
    registry: Registry | None = None,
    *,
    offline_hint: bool = True,
) -> LLMClient:
    """The provider's client (``max_retries=0``: plandag's retry policy decides), its key
    checked first: a missing key exits 2 here, before anything runs (saying ``--offline``
    needs none when ``offline_hint``: the command has ``--offline``). ``offline``: the
    offline model's in-process client (:func:`plandag.testing.offline.offline_client`),
    whose plans use ``registry``'s tools (None: the default registry)."""
    from plandag.executors.access import provider_client

    if provider == OFFLINE:
        from plandag.testing.offline import offline_client

        return offline_client(registry)

    key = require_model_key(provider, base_url, offline_hint=offline_hint)
    return provider_client(provider, base_url, key)


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
            _fail(f"{', '.join(given)} needs --planner anthropic|openai|offline")
        return None
    name = planner_model(planner, model, "--planner")
    if save_repairs is not None and save_repairs.exists() and not save_repairs.is_dir():
        _fail(f"--save-repairs {save_repairs} is not a folder")
    return name
