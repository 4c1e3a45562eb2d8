from __future__ import annotations

import pytest

from plandag.tools.allowlist import host_allowed, host_pattern


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
