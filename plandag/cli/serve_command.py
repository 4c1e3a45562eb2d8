"""``plandag serve``: the web console (docs/console.md).

Starts the console (:mod:`plandag.serve`) with uvicorn on 127.0.0.1 (``--host`` to listen
elsewhere), prints its address with a new random access token, and serves until Ctrl-C.
The planner of conversations is the model of ``plandag run`` (``--provider``, ``--model``,
``--base-url``; the key from ``ANTHROPIC_API_KEY`` or ``OPENAI_API_KEY``); without a key
the console still shows runs and the inbox, and records messages without planning them.
``--offline`` plans with the offline model instead (no key; plans built from the message's
words, answers extracted from the data: :mod:`plandag.testing.offline`).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from plandag.cli.models_options import (
    BaseUrlOption,
    ModelOption,
    OfflineOption,
    ProviderOption,
)
from plandag.cli.options import McpOption, StoreOption, fail

__all__ = ["check_can_listen", "is_loopback", "register"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (``localhost`` or a loopback
    address such as 127.0.0.1 or ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_can_listen(host: str, port: int) -> str | None:
    """Why the console could not listen on ``host:port``, or None when it can.

    Binds a socket the way uvicorn does (``SO_REUSEADDR``, so a port left in ``TIME_WAIT``
    by a console that just stopped is not refused) and closes it at once, so a port in use
    or an address of another machine is an error before the address and token are printed.

    Args:
        host: a host name or address (an IPv6 address bare or in brackets).
        port: a TCP port, 1 to 65535.

    Returns:
        The system's reason (such as "Address already in use"), or None.
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as error:
        return str(error.strerror or error)
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as error:
        return str(error.strerror or error)
    return None


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the ``plandag`` app."""
    try:
        from plandag.serve import DEFAULT_HOST, DEFAULT_PORT
    except ImportError:  # without the serve extra: the command says so when it runs
        DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765

    @app.command("serve")
    def serve_command(
        host: Annotated[
            str,
            typer.Option(
                "--host",
                help="The address to listen on. Default 127.0.0.1: this machine only; give "
                "0.0.0.0 (or another interface) to be reachable from other machines.",
            ),
        ] = DEFAULT_HOST,
        port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = (
            DEFAULT_PORT
        ),
        allow_host: Annotated[
            list[str] | None,
            typer.Option(
                "--allow-host",
                metavar="NAME",
                help="A host name the console answers to besides 127.0.0.1, localhost and "
                "--host (repeatable; *.example.org for a domain): the name people type to "
                "reach a console bound to 0.0.0.0. A request naming another host gets 400.",
            ),
        ] = None,
        store: StoreOption = None,
        tools: Annotated[
            list[Path] | None,
            typer.Option(
                "--tools",
                metavar="FILE.py",
                help="A Python file whose @tool and @check functions are registered (repeatable).",
            ),
        ] = None,
        mcp: McpOption = None,
        provider: ProviderOption = "anthropic",
        offline: OfflineOption = False,
        model: ModelOption = None,
        base_url: BaseUrlOption = None,
        write_boundary: Annotated[
            list[str] | None,
            typer.Option(
                "--write-boundary",
                metavar="SPEC",
                help="Where approved plans may write (repeatable). Default: the working directory.",
            ),
        ] = None,
        investigate: Annotated[
            bool,
            typer.Option(
                "--investigate/--no-investigate",
                help="In plan mode, the planner first runs a plan of tools without effects "
                "and writes the plan with what it found (default), or writes it at once.",
            ),
        ] = True,
        card_chars: Annotated[
            int,
            typer.Option(
                "--card-chars",
                min=0,
                help="The most characters a decision card shows of a plan; a longer plan is "
                "cut with a notice (the decision never is).",
            ),
        ] = 20_000,
    ) -> None:
        """Serve the web console: conversations with plan mode, decision cards, runs, inbox.

        Listens on 127.0.0.1 unless --host says otherwise. Prints the address with a new
        access token; every request needs it (the first visit sets a cookie). The
        console asks your name once per browser session and records it with every
        decision. It answers only requests for 127.0.0.1, localhost, --host and each
        --allow-host NAME (400 otherwise), and no page runs an inline script.
        """
        try:
            import uvicorn

            from plandag.serve import ConsoleConfig, create_app, new_token
            from plandag.serve.security import host_patterns
        except ImportError as error:
            fail(
                f"plandag serve needs the serve extra (missing: {error.name}): pip install "
                "'plandag[serve]'"
            )

        from plandag.cli.common import command_registry
        from plandag.cli.models_options import (
            OFFLINE,
            has_key,
            key_variable,
            model_client,
            offline_provider,
            planner_model,
            print_offline_note,
        )
        from plandag.conversation import planner_factory, planner_function
        from plandag.conversation.planmode import PlannerFunction
        from plandag.models import LLMClient
        from plandag.store import default_store_path
        from plandag.tools.boundary import WriteBoundary

        provider = offline_provider(provider, offline, base_url)
        name = planner_model(provider, model)
        if provider == OFFLINE:
            print_offline_note()
        hosts = [host, *(allow_host or [])]
        for flag, names in (("--host", [host]), ("--allow-host", allow_host or [])):
            try:
                host_patterns(names)
            except ValueError as error:
                fail(f"{flag}: {error}")
        registry = command_registry(tools, mcp=mcp or [])
        base = Path.cwd()
        try:
            boundary = WriteBoundary.from_specs(write_boundary or [base])
        except ValueError as error:
            fail(f"--write-boundary: {error}")
        planner: PlannerFunction | None = None
        client: LLMClient | None = None
        if has_key(provider) or (provider == "openai" and base_url is not None):
            client = model_client(provider, base_url, registry)
            planner = planner_function(
                planner_factory(client, name), full_registry=registry, investigate=investigate
            )
        else:
            sys.stderr.write(
                f"warning: no {key_variable(provider)}: conversations are recorded but "
                "not planned; set it (any value with --base-url for a local server) to plan\n"
            )
        config = ConsoleConfig(
            store_path=store if store is not None else default_store_path(),
            registry=registry,
            planner=planner,
            write_boundary=boundary,
            base=base,
            tools=tuple(str(Path(tool).resolve()) for tool in dict.fromkeys(tools or [])),
            boundary_specs=tuple(write_boundary) if write_boundary else None,
            card_chars=card_chars,
            on_close=client.aclose if client is not None else None,
            offline=provider == OFFLINE,
        )
        reason = check_can_listen(host, port)
        if reason is not None:
            fail(
                f"cannot listen on {host}:{port}: {reason}; another program (another plandag "
                "serve?) may be using it: choose another port with --port, or an address of "
                "this machine with --host"
            )
        token = new_token()
        app = create_app(config, token, allowed_hosts=hosts)
        shown_host = f"[{host}]" if ":" in host else host
        if not is_loopback(host):
            sys.stderr.write(
                f"warning: listening on {host}, beyond this machine: anyone who can reach "
                "it and has the token can approve plans; prefer 127.0.0.1 behind an SSH "
                "tunnel or a TLS proxy (requests must name 127.0.0.1, localhost, "
                f"{host} or a name given with --allow-host)\n"
            )
        sys.stdout.write(f"plandag console: http://{shown_host}:{port}/?token={token}\n")
        sys.stdout.flush()
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
