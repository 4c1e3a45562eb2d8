"""``plandag serve``: the web console for the people in the loop (docs/console.md).

:func:`create_app` builds the ASGI app over a :class:`ConsoleConfig` (the run store, the
registry, the conversation planner); :mod:`plandag.serve.security` holds the access token,
the person's name and CSRF; :class:`Console` does the work behind the pages.
"""

from plandag.serve.app import create_app
from plandag.serve.console import Console, ConsoleConfig, ConsoleError
from plandag.serve.security import new_token

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Console",
    "ConsoleConfig",
    "ConsoleError",
    "create_app",
    "new_token",
]

DEFAULT_HOST = "127.0.0.1"
"""The console listens on the loopback interface unless ``--host`` says otherwise."""
DEFAULT_PORT = 8765
"""The console's default TCP port."""
