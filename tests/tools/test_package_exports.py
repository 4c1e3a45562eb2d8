"""plandag.tools exports exactly what its __all__ lists."""

from __future__ import annotations

import pkgutil

import plandag.tools


def test_all_is_sorted_and_exported() -> None:
    assert plandag.tools.__all__ == sorted(plandag.tools.__all__)
    for name in plandag.tools.__all__:  # imported on first use
        getattr(plandag.tools, name)
    public = {name for name in vars(plandag.tools) if not name.startswith("_")}
    submodules = {module.name for module in pkgutil.iter_modules(plandag.tools.__path__)}
    assert public - submodules == set(plandag.tools.__all__)
