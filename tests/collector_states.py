"""Whether the garbage collector was on at each call of a function, for the tests of code
that pauses it."""

from __future__ import annotations

import gc
from typing import Any

import pytest


def collector_states(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[bool]:
    """Replace ``owner.name`` (a function of a module or an object) for the test with one
    that calls it as it was; the list returned gets :func:`gc.isenabled` at each call,
    taken before the call."""
    states: list[bool] = []
    function = getattr(owner, name)

    def watching(*args: Any, **kwargs: Any) -> Any:
        states.append(gc.isenabled())
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, watching)
    return states
