"""Packages that import their parts on first use (a module ``__getattr__``, PEP 562).

A package's ``__init__`` lists its public names and where each is defined, and imports
none of them: ``import plandag`` or ``import plandag.scheduler`` costs almost nothing, and
the first ``plandag.compile_plan`` imports the compiler. Type checkers read the same names
from explicit imports under ``typing.TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, str | None]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names load lazily.

    Args:
        package: the package's ``__name__``.
        exports: each public name -> (the module that defines it, the name there); a name
            of None exports the module itself.

    Returns:
        ``(__getattr__, __dir__)``: assign both at the package's top level. The first
        look-up of a name imports its module and stores the value in the package, so later
        look-ups cost a dictionary access; an unknown name raises ``AttributeError``.
    """

    def __getattr__(name: str) -> object:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = target
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
