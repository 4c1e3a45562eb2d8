"""A model server's URL given with a user and password (``--base-url
http://user:password@host/``): the run store keeps it without them.

A run's options hold the base URL of its planner's and its model steps' provider
(:class:`~plandag.runs.options.RunOptions` ``planner`` and ``executor``). When that URL
has a ``user:password@`` part (RFC 3986, 3.2.1: the userinfo), :func:`stored_model_options`
stores the URL without it, and beside it (``base_url_credentials``) only what is needed to
put it back and is no secret:

* ``user``: the user name, when the userinfo has a password (``user:password``); None when
  the userinfo is one part (``token@host``), which is then the secret itself;
* ``secret_from``: the name of the secret environment variable (``*_API_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``; :func:`plandag.trace.redact.environment_secrets`)
  whose value is exactly the password (or the one-part userinfo), when one was; else None.

A later segment of the run (``resume``, ``approve``, ``reject``) calls
:func:`restored_model_options`: the URL given again (``--base-url`` with the user and
password) is used as it is; otherwise the userinfo is rebuilt from the environment
variable, and when there is none (or it is not set any more) the command stops and says
what to give. The password itself is never stored.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from plandag.errors import InputError
from plandag.trace.redact import environment_secrets, is_secret_environment_name

__all__ = [
    "CREDENTIALS_KEY",
    "restored_model_options",
    "split_userinfo",
    "stored_model_options",
]

CREDENTIALS_KEY = "base_url_credentials"
"""The key, beside ``base_url``, of what a stored URL lost (see the module docstring)."""

_SECTIONS = ("planner", "executor")


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the userinfo.

    Args:
        url: a URL (``http://user:password@127.0.0.1:8000/v1``).

    Returns:
        ``(url without "user:password@", "user:password")``; ``(url, None)`` when it has
        no userinfo or is not a URL Python can split (then it is kept as it is: the
        store's text rules still mask a password written in it).
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), userinfo


def _stored_section(section: Mapping[str, Any], environment: Mapping[str, str]) -> dict[str, Any]:
    stored = dict(section)
    url = stored.get("base_url")
    if not isinstance(url, str):
        return stored
    bare, userinfo = split_userinfo(url)
    if userinfo is None:
        return stored
    user, colon, password = userinfo.partition(":")
    secret = password if colon else userinfo
    stored["base_url"] = bare
    stored[CREDENTIALS_KEY] = {
        "user": user if colon else None,
        "secret_from": environment.get(secret) if secret else None,
    }
    return stored


def stored_model_options(
    options: Mapping[str, Any], environment: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``options`` (a run's stored options) with the ``base_url`` of ``planner`` and
    ``executor`` stored without user and password (module docstring).

    Args:
        options: the options as a JSON-like mapping (:meth:`RunOptions.as_json`).
        environment: ``{secret value: variable name}`` (default: the process's,
            :func:`~plandag.trace.redact.environment_secrets`).

    Returns:
        A copy; the sections without a userinfo in their URL are unchanged.
    """
    secrets = environment_secrets() if environment is None else environment
    document = dict(options)
    for name in _SECTIONS:
        section = document.get(name)
        if isinstance(section, Mapping):
            document[name] = _stored_section(section, secrets)
    return document


def _with_userinfo(url: str, userinfo: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


def _comparable(url: str) -> str:
    return split_userinfo(url)[0].rstrip("/")


def restored_model_options(
    options: Mapping[str, Any],
    base_url: str | None = None,
    *,
    run_id: str = "",
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``options`` as stored, with the user and password of each section's ``base_url``
    put back (module docstring).

    Args:
        options: the run's stored options.
        base_url: the URL given again (``--base-url``), or None. Without its userinfo it
            must be the run's URL; it is then used as it is (with the user and password it
            holds).
        run_id: the run, named in errors.
        environ: the environment (default ``os.environ``).

    Returns:
        A copy in which no section holds ``base_url_credentials`` any more.

    Raises:
        InputError: ``base_url`` is not the run's model server; or the run's URL had a
            user and password that the environment cannot give back and ``base_url`` was
            not given (the message says what to give).
    """
    source = os.environ if environ is None else environ
    where = f"run {run_id}: " if run_id else ""
    document = dict(options)
    sections = [
        name
        for name in _SECTIONS
        if isinstance(document.get(name), Mapping) and document[name].get("base_url")
    ]
    if base_url is not None:
        shown = split_userinfo(base_url)[0]
        if not sections:
            raise InputError(
                f"{where}--base-url {shown}: the run calls its provider's own API (it was "
                "started without --base-url); leave --base-url out"
            )
        for name in sections:
            section = dict(document[name])
            if _comparable(str(section["base_url"])) != _comparable(base_url):
                raise InputError(
                    f"{where}--base-url {shown} is not the run's model server "
                    f"{section['base_url']}; give that URL (with its user and password, if "
                    "it has them)"
                )
            section["base_url"] = base_url
            section.pop(CREDENTIALS_KEY, None)
            document[name] = section
        return document
    for name in sections:
        section = dict(document[name])
        credentials = section.pop(CREDENTIALS_KEY, None)
        if not isinstance(credentials, Mapping):
            document[name] = section
            continue
        url = str(section["base_url"])
        variable = credentials.get("secret_from")
        user = credentials.get("user")
        example = _with_userinfo(url, "<user>:<password>")
        if not isinstance(variable, str) or (user is not None and not isinstance(user, str)):
            raise InputError(
                f"{where}its model server's URL {url} was given with a user and password, "
                f"which the run store does not keep; give them again: --base-url {example}"
            )
        if not is_secret_environment_name(variable):
            raise InputError(
                f"{where}the store names the environment variable {variable!r}, which is not "
                "a secret's name (*_API_KEY, *_TOKEN, *_SECRET, *_PASSWORD); it is not read; "
                f"give the URL again: --base-url {example}"
            )
        if variable not in source:
            raise InputError(
                f"{where}its model server's URL {url} took its password from the "
                f"environment variable {variable}, which the run store does not keep; set "
                f"{variable} to the same value, or give the URL again: --base-url {example}"
            )
        secret = source[variable]
        section["base_url"] = _with_userinfo(url, secret if user is None else f"{user}:{secret}")
        document[name] = section
    return document
