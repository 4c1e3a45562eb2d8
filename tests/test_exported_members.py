"""The public API is what ``plandag.__all__`` says, and nothing is missing from it."""

import plandag


def test_all_names_exist() -> None:
    missing = [name for name in plandag.__all__ if not hasattr(plandag, name)]
    assert missing == []


def test_all_is_sorted_and_unique() -> None:
    assert list(plandag.__all__) == sorted(set(plandag.__all__))


def test_every_public_import_is_listed() -> None:
    public = {
        name
        for name, value in vars(plandag).items()
        if not name.startswith("_") and not isinstance(value, type(plandag))
    }
    assert public == set(plandag.__all__) - {"__version__"}


def test_user_facing_imports() -> None:
    from plandag import ToolContext, tool

    @tool
    def double(x: int) -> int:
        return 2 * x

    assert double.name == "double"
    assert ToolContext(run_id="r", step_id=3).idempotency_key == "r:3"
