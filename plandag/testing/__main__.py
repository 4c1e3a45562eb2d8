"""``python -m plandag.testing``: run the local Messages API server (or, with ``--protocol
openai``, the OpenAI-compatible chat completions server) until interrupted.

Usage::

    python -m plandag.testing [--port 8767] --script replies.jsonl [--ttft 0.5]
        [--tokens-per-second 80] [--default-text TEXT] [--exit-after SECONDS]
        [--protocol messages|openai] [--schema-follower SEED]

The first line printed is the server's base URL (``http://127.0.0.1:PORT``, or
``http://127.0.0.1:PORT/v1`` for ``openai``; without ``--port``, a free port), for
``ANTHROPIC_BASE_URL`` or ``plandag run --base-url``. The script file holds one reply a line
(forms in :meth:`plandag.testing.ScriptedResponse.from_mapping`). The server stops on
Ctrl-C, SIGTERM, or after ``--exit-after`` seconds. With ``--schema-follower SEED``, once the
script is used up every structured-output request is answered with a random instance of its
schema (:class:`plandag.testing.SchemaFollower`). Exit status 0, or 2 for a bad argument
or script file.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from plandag.errors import InputError
from plandag.testing.openai_server import ChatCompletionsServer
from plandag.testing.schema_model import SchemaFollower
from plandag.testing.script import Responder, Script
from plandag.testing.server import MessagesServer, cannot_listen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m plandag.testing",
        description="A local Anthropic Messages API server that plays scripted replies.",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free one)"
    )
    parser.add_argument("--script", help="JSON Lines file, one reply a line")
    parser.add_argument("--ttft", type=float, default=0.0, help="time to first token, seconds")
    parser.add_argument(
        "--tokens-per-second", type=float, default=None, help="output pace (default: no pacing)"
    )
    parser.add_argument(
        "--default-text", default=None, help="text to reply once the script is used up"
    )
    parser.add_argument(
        "--exit-after", type=float, default=None, help="stop after this many seconds"
    )
    parser.add_argument(
        "--schema-follower",
        type=int,
        default=None,
        metavar="SEED",
        help="once the script is used up, answer each structured-output request with a "
        "random instance of its schema (seeded)",
    )
    parser.add_argument(
        "--protocol",
        choices=("messages", "openai"),
        default="messages",
        help="the Anthropic Messages API (default) or OpenAI-compatible chat completions",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until Ctrl-C, SIGTERM or ``--exit-after``.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0, or 2 when the script file or an option is unusable.
    """
    args = _parser().parse_args(argv)
    try:
        script = Script.from_jsonl(args.script) if args.script else Script()
        default_text: str | None = args.default_text
        kind = ChatCompletionsServer if args.protocol == "openai" else MessagesServer
        default: Responder | None = None
        if args.schema_follower is not None:
            default = SchemaFollower(args.schema_follower, text=default_text or "ok")
        elif default_text is not None:
            default = lambda body: default_text  # noqa: E731
        server = kind(
            script,
            port=args.port,
            ttft=args.ttft,
            tokens_per_second=args.tokens_per_second,
            default=default,
        )
    except (InputError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    try:
        server.start()
    except OSError as error:
        print(f"error: {cannot_listen(args.port, error)}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        print(server.url + ("/v1" if args.protocol == "openai" else ""), flush=True)
        print(f"{len(script)} scripted replies queued; Ctrl-C stops", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait(args.exit_after)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
