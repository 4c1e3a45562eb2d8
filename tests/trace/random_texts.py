"""Random texts for the tests of the word finder and the store's sealing rules: letters and
blanks with pieces put in at random places."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence


def texts_with_pieces(
    rng: random.Random,
    sizes: Iterable[int],
    per_size: int,
    draw: Callable[[random.Random], Sequence[str]],
) -> list[str]:
    """``per_size`` texts of each of ``sizes`` characters of ``abcdefg`` and blanks, each
    with the pieces ``draw`` picks for it put in, one by one, at random places."""
    texts = []
    for size in sizes:
        for _ in range(per_size):
            text = "".join(rng.choice("abcdefg ") for _ in range(size))
            for piece in draw(rng):
                at = rng.randint(0, len(text))
                text = text[:at] + piece + text[at:]
            texts.append(text)
    return texts
