"""Trusted project files: the MCP servers a project's config names start only once the
person has trusted that file.

A project file (``plandag.toml``, or ``pyproject.toml`` with ``[tool.plandag]``) comes with
the project: a folder cloned from elsewhere would otherwise start any program its
``[[mcp]]`` tables name as soon as a ``plandag`` command runs there. ``plandag trust FILE``
records the file's SHA-256 under its resolved path in the user's trust list,
``trusted.json`` in the user's data folder (``platformdirs.user_data_path("plandag")``:
``~/.local/share/plandag`` on Linux, honouring ``XDG_DATA_HOME``). A file is trusted while
its bytes still have the hash recorded for its path: any change (another server, another
command, a new argument) needs ``plandag trust`` again. Servers given with ``--mcp`` on the
command line need no trust: the person typed them.

The list is written whole to a temporary file in the same folder and renamed over the old
one (a crash leaves the old list or the new one, never half of one), readable by the user
only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

import platformdirs

from plandag.errors import InputError

__all__ = ["TRUST_FILE", "file_sha256", "is_trusted", "require_trusted", "trust", "trust_path"]

TRUST_FILE = "trusted.json"
"""The trust list's file name in the user's data folder."""


def trust_path() -> Path:
    """Where the trust list lives: ``trusted.json`` in the user's data folder."""
    return platformdirs.user_data_path("plandag") / TRUST_FILE


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of the file's bytes.

    Raises:
        InputError: the file cannot be read.
    """
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror or error}") from error


def _read() -> dict[str, Any]:
    path = trust_path()
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": 1, "files": {}}
    except (OSError, ValueError) as error:
        raise InputError(
            f"the trust list {path} cannot be read ({error}); remove it and trust the "
            "project files again"
        ) from error
    if not isinstance(document, dict) or not isinstance(document.get("files"), dict):
        raise InputError(
            f"the trust list {path} is not plandag's; remove it and trust the project files again"
        )
    return document


def is_trusted(path: Path) -> bool:
    """Whether the file at ``path`` is trusted: its current hash is the one recorded for it.

    Raises:
        InputError: the file or the trust list cannot be read.
    """
    resolved = path.resolve()
    entry = _read()["files"].get(str(resolved))
    return isinstance(entry, dict) and entry.get("sha256") == file_sha256(resolved)


def trust(path: Path) -> str:
    """Record the file at ``path`` as trusted with its current hash; returns the hash.

    Raises:
        InputError: the file is missing or is not a file, or the trust list cannot be
            read or written.
    """
    resolved = path.resolve()
    if not resolved.is_file():
        raise InputError(f"{path} is not a file; give the path of a plandag.toml or pyproject.toml")
    digest = file_sha256(resolved)
    document = _read()
    document["files"][str(resolved)] = {"sha256": digest, "trusted_at": time.time()}
    target = trust_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".trusted-", dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(document, stream, indent=2, sort_keys=True)
                stream.write("\n")
            os.chmod(temporary, 0o600)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise InputError(f"cannot write the trust list {target}: {error}") from error
    return digest


def require_trusted(path: Path, what: str) -> None:
    """Raise unless the file at ``path`` is trusted.

    Args:
        path: the project file.
        what: what it would start, for the message (``MCP servers files (stdio: ...)``).

    Raises:
        InputError: the file is not trusted, or changed since it was; the message names the
            command that trusts it (``plandag trust PATH``).
    """
    if is_trusted(path):
        return
    resolved = path.resolve()
    entry = _read()["files"].get(str(resolved))
    state = "changed since it was trusted" if isinstance(entry, dict) else "is not trusted"
    raise InputError(
        f"{resolved} names {what}, and the file {state}: plandag starts no server a "
        "project file names until you trust it; read it, then run "
        f"`plandag trust {shlex.quote(str(resolved))}`"
    )
