"""A small registry of typed tools and checks for the compiler's tests.

The tools declare result types of every kind the compiler reasons about: ``str``, a
TypedDict, a pydantic model, ``list[model]``, ``int``, ``Any``; and one tool with effects
that names its write target (``writes="path"``).
"""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
import typing_extensions
from pydantic import BaseModel

from plandag.checks.base import CheckOutcome, check
from plandag.tools.base import tool
from plandag.tools.registry import Registry


class Totals(TypedDict):
    vNF: str
    count: int


class Party(typing_extensions.TypedDict):
    """pydantic needs typing_extensions' TypedDict inside models on Python < 3.12."""

    CNPJ: str
    name: str


class Item(BaseModel):
    name: str
    price: float


class Invoice(BaseModel):
    key: str
    items: list[Item]
    emitter: Party


@tool
def read_text(path: str) -> str:
    """Read a text file."""
    return path


@tool
def totals(xml: str) -> Totals:
    """The totals of an invoice."""
    return {"vNF": "1.00", "count": 1}


@tool
def items(xml: str) -> list[Item]:
    """The items of an invoice."""
    return [Item(name="pen", price=1.0)]


@tool
def invoice(xml: str) -> Invoice:
    """A whole invoice."""
    return Invoice(key="k", items=[], emitter={"CNPJ": "1", "name": "A"})


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool
def anything(value: Any = None) -> Any:
    """Return its argument."""
    return value


@tool(effects="write", writes="path")
def save(path: str, data: Any = None) -> str:
    """Write data to a file."""
    return path


@check
def not_empty(result: Any, path: str | None = None) -> CheckOutcome:
    """The result (or the value at path) is not empty."""
    return CheckOutcome("not_empty", "pass" if result else "fail")


@check
def regex(result: Any, pattern: str, path: str | None = None) -> CheckOutcome:
    """The value matches the pattern."""
    return CheckOutcome("regex", "pass")


@tool(egress=True, taint_source=True, reaches="url")
def fetch(url: str, query: str = "") -> str:
    """GET a page (an egress tool whose result is tainted)."""
    return url


@tool(egress=True, reaches="url")
def send(url: str, body: Any = None) -> str:
    """Send data to a URL (an egress tool)."""
    return url


def _noted_audited(step: Any, steps: Any) -> dict[str, Any] | None:
    return {} if step.description == "audited" else None


@check(required_on=_noted_audited)
def audit_trail(result: Any) -> bool:
    """Required on every step noted "audited" (attached where a plan leaves it out)."""
    return True


TOOLS = [read_text, totals, items, invoice, add, anything, save, fetch, send]
CHECKS = [not_empty, regex, audit_trail]


def make_registry() -> Registry:
    """A fresh registry with the test tools and checks."""
    return Registry(TOOLS, CHECKS)


@pytest.fixture(scope="session")
def registry() -> Registry:
    """The test registry (shared; tests must not add to it)."""
    return make_registry()
