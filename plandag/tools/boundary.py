"""The write boundary: where a run may write (ARCHITECTURE.md, "Brakes").

A boundary is a list of allowed roots (folders). A target is inside when, after making it
absolute against the base folder and resolving ``..`` and symlinks, it lies in one of the
roots. The compiler checks literal targets; the runner checks resolved targets again just
before a tool with ``writes`` runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from plandag.errors import BoundaryError

__all__ = ["WriteBoundary"]


class WriteBoundary:
    """Folders a run may write into.

    Args:
        roots: allowed folders; relative ones are taken against ``base``.
        base: the folder relative targets are resolved against (default: the working
            directory at construction time).
    """

    def __init__(
        self, roots: Iterable[str | os.PathLike[str]], base: str | os.PathLike[str] | None = None
    ) -> None:
        self.base = Path(base) if base is not None else Path.cwd()
        self.roots = [self._real(Path(root)) for root in roots]

    def _real(self, path: Path) -> Path:
        absolute = path if path.is_absolute() else self.base / path
        # realpath resolves symlinks of every existing prefix and normalises ``..``
        return Path(os.path.realpath(absolute))

    def resolve(self, target: str | os.PathLike[str]) -> Path:
        """The real absolute path ``target`` would write to."""
        return self._real(Path(target))

    def contains(self, target: str | os.PathLike[str]) -> bool:
        """True when ``target`` resolves inside one of the roots."""
        real = self.resolve(target)
        return any(real == root or root in real.parents for root in self.roots)

    def check(self, target: str | os.PathLike[str], *, step_id: int | None = None) -> Path:
        """Return the resolved path, or raise when it lies outside every root.

        Raises:
            BoundaryError: the target escapes (by ``..``, an absolute path or a symlink).
        """
        if self.contains(target):
            return self.resolve(target)
        where = f"step {step_id}: " if step_id is not None else ""
        allowed = ", ".join(str(root) for root in self.roots) or "nowhere"
        raise BoundaryError(
            f"{where}write target {str(target)!r} resolves to {self.resolve(target)}, outside "
            f"the write boundary ({allowed}); write inside it or widen it with --write-boundary",
            target=str(target),
        )

    def __repr__(self) -> str:
        return f"WriteBoundary({[str(root) for root in self.roots]!r})"
