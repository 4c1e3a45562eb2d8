from __future__ import annotations

import pytest

from plandag.allowlist import host_allowed, host_pattern, pattern_problem


@pytest.mark.parametrize(
    ("url", "patterns", "allowed"),
    [
        ("https://api.example.com/v1", ["api.example.com"], True),
        ("https://API.Example.com./v1", ["api.example.com"], True),
        ("https://evil.com/?api.example.com", ["api.example.com"], False),
        ("https://a.b.example.org/x", ["*.example.org"], True),
        ("https://example.org/x", ["*.example.org"], False),
        ("http://127.0.0.1:8080/", ["127.0.0.1:8080"], True),
        ("http://127.0.0.1:9090/", ["127.0.0.1:8080"], False),
        ("http://127.0.0.1:9090/", ["127.0.0.1"], True),
        ("http://[::1]:8080/", ["[::1]:8080"], True),
        ("http://[::1]:8081/", ["[::1]:8080"], False),
        ("https://api.example.com/", ["https://api.example.com"], True),
        ("https://api.example.com/", [], False),
    ],
)
def test_host_allowed(url: str, patterns: list[str], allowed: bool) -> None:
    assert host_allowed(url, patterns) is allowed


@pytest.mark.parametrize(
    ("url", "pattern"),
    [
        ("https://API.example.com/v1?q=1", "api.example.com:443"),
        ("http://127.0.0.2:8081/collect", "127.0.0.2:8081"),
        ("http://[::1]/x", "[::1]:80"),
        ("ftp://example.com/x", None),
        ("not a url", None),
    ],
)
def test_host_pattern(url: str, pattern: str | None) -> None:
    assert host_pattern(url) == pattern


def test_a_host_pattern_matches_its_default_port_only() -> None:
    assert host_allowed("https://api.example.com/x", ["api.example.com:443"]) is True
    assert host_allowed("http://api.example.com/x", ["api.example.com:443"]) is False
    assert host_allowed("https://api.example.com:8443/x", ["api.example.com:443"]) is False


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("example.com/path", "it has a path, query or user part ('/', '?', '#' or '@')"),
        ("https://example.com/api", "it has a path, query or user part ('/', '?', '#' or '@')"),
        ("user@example.com", "it has a path, query or user part ('/', '?', '#' or '@')"),
        ("exa mple.com", "it holds a space"),
        ("127.0.0.1:*", "its port '*' is not a number from 1 to 65535"),
        ("example.com:abc", "its port 'abc' is not a number from 1 to 65535"),
        ("127.0.0.1:99999", "its port '99999' is not a number from 1 to 65535"),
        ("[::1]:0", "its port '0' is not a number from 1 to 65535"),
    ],
)
def test_a_pattern_that_can_never_match_is_named_with_its_problem(
    pattern: str, problem: str
) -> None:
    assert pattern_problem(pattern) == problem


@pytest.mark.parametrize(
    "pattern",
    [
        "api.example.com",
        "*.example.org",
        "*",
        "127.0.0.1:8080",
        "[::1]:8080",
        "[::1]",
        "::1",
        "https://api.example.com",
        "https://api.example.com:8443/",
        "EXAMPLE.com",
    ],
)
def test_a_usable_pattern_has_no_problem(pattern: str) -> None:
    assert pattern_problem(pattern) is None
