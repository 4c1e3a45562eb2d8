"""``parents_first_order``: every step after its parents (the mapping's own order when it is
one), None for a cycle; ``longest_path`` over it answers as over ``dependency_order``'s."""

from __future__ import annotations

import random

from plandag.dag.graph import (
    dependency_order,
    longest_path,
    parents_first_among,
    parents_first_order,
)


def _random_parents(rng: random.Random, size: int) -> dict[int, list[int]]:
    ids = rng.sample(range(1, 10 * size), size)  # ids not in a topological order
    parents = {ids[i]: rng.sample(ids[:i], min(i, rng.randint(0, 3))) for i in range(size)}
    keys = list(parents)
    if rng.random() < 0.5:
        rng.shuffle(keys)  # the mapping's own order is then rarely one
    return {key: parents[key] for key in keys}


def _is_parents_first(order: list[int], parents: dict[int, list[int]]) -> bool:
    place = {node: index for index, node in enumerate(order)}
    return all(place[parent] < place[node] for node, of in parents.items() for parent in of)


def test_the_order_puts_parents_first_and_the_longest_path_is_dependency_orders() -> None:
    rng = random.Random(7)
    for _ in range(300):
        parents = _random_parents(rng, rng.randint(0, 40))
        order = parents_first_order(parents)
        assert order is not None
        assert sorted(order) == sorted(parents)
        assert _is_parents_first(order, parents)
        expected = dependency_order(parents)
        assert expected is not None
        durations = {node: rng.choice([0.0, 0.5, 1.0, rng.random()]) for node in parents}
        assert longest_path(order, parents.__getitem__, durations) == longest_path(
            expected, parents.__getitem__, durations
        )


def test_the_mappings_own_order_is_kept_when_it_puts_parents_first() -> None:
    parents = {5: [], 2: [5], 9: [5, 2], 1: [9]}
    assert parents_first_order(parents) == [5, 2, 9, 1]


def test_a_parent_that_is_not_a_key_is_a_step_of_its_own() -> None:
    assert parents_first_order({2: [1], 3: [2]}) == [1, 2, 3]


def test_a_cycle_has_no_order() -> None:
    assert parents_first_order({1: [2], 2: [1]}) is None
    assert parents_first_order({1: [1]}) is None


def _longest_path_by_sorted_parents(
    order: list[int], parents: dict[int, list[int]], durations: dict[int, float]
) -> tuple[list[int], float]:
    """The longest path with its ties broken in sorted order: each step's parents taken
    from the smallest id (a later one wins when it finishes strictly later), the end the
    greatest (finish, -id)."""
    finish: dict[int, float] = {}
    previous: dict[int, int | None] = {}
    for node in order:
        best_parent: int | None = None
        best = 0.0
        for parent in sorted(parents[node]):
            if finish[parent] > best or best_parent is None:
                best, best_parent = finish[parent], parent
        finish[node] = best + durations[node]
        previous[node] = best_parent
    if not finish:
        return [], 0.0
    end = max(finish, key=lambda node: (finish[node], -node))
    path = [end]
    while (before := previous[path[-1]]) is not None:
        path.append(before)
    return path[::-1], finish[end]


def test_ties_go_to_the_smallest_id_whatever_the_order_of_the_parents() -> None:
    rng = random.Random(11)
    figures = [0.0, 0.5, 1.0, 0.25]  # few: many parents and ends finish at the same time
    for round_ in range(1200):
        parents = _random_parents(rng, rng.randint(0, 30))
        for of in parents.values():
            rng.shuffle(of)
        order = dependency_order(parents)
        assert order is not None
        # a third of the rounds with durations that are infinite or not a number
        odd = [float("nan"), float("inf")] if round_ % 3 == 0 else []
        durations = {
            node: rng.choice(figures + odd) if rng.random() < 0.9 else rng.choice(figures)
            for node in parents
        }
        got = longest_path(order, parents.__getitem__, durations)
        expected = _longest_path_by_sorted_parents(order, parents, durations)
        assert got[0] == expected[0]
        assert repr(got[1]) == repr(expected[1])


def test_the_order_among_the_keys_is_the_filtered_ones() -> None:
    rng = random.Random(5)
    for round_ in range(600):
        parents = _random_parents(rng, rng.randint(0, 25))
        keys = list(parents)
        dropped = set(rng.sample(keys, rng.randint(0, len(keys) // 3))) if keys else set()
        # some parents are steps that are not keys; a third of the rounds add a cycle
        kept: dict[int, list[int]] = {key: of for key, of in parents.items() if key not in dropped}
        if round_ % 3 == 0 and len(kept) > 1:
            first, second = rng.sample(list(kept), 2)
            kept[first] = [*kept[first], second]
            kept[second] = [*kept[second], first]
        among = {key: [parent for parent in of if parent in kept] for key, of in kept.items()}
        expected = parents_first_order(among)
        found = parents_first_among(kept)
        if expected is None:
            assert found is None
            continue
        assert found is not None
        order, of = found
        assert order == expected
        assert {key: list(of[key]) for key in kept} == among
