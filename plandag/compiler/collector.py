"""The garbage collector paused while a plan compiles.

Compiling allocates many objects that live until the plan is compiled (pydantic models,
diagnostics, graph dicts), and CPython's collector traverses every young object again at
each collection, so with it running compile time per step grows with the plan (1.3 to 1.6
times per step from 1,000 to 10,000 steps; flat with it paused,
``benchmarks/trace_bench.py``). :func:`collector_paused` turns it off for the call and
back on after it, whatever happens.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

__all__ = ["collector_paused", "paused_collector"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_lock = threading.Lock()
_depth = 0
_restore = False


@contextmanager
def paused_collector() -> Iterator[None]:
    """Pause the garbage collector (``gc.disable``) inside the ``with`` block.

    Pauses nest, in one thread or several: the collector is turned off when the first
    pause starts and its earlier state (on or off) is restored when the last one ends, in
    a ``finally``, so an exception (a :class:`~plandag.errors.PlanError`, a
    ``KeyboardInterrupt``) restores it too. A collector already off stays off.
    """
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()


def collector_paused(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorate ``function`` to run inside :func:`paused_collector`."""

    @functools.wraps(function)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with paused_collector():
            return function(*args, **kwargs)

    return paused
