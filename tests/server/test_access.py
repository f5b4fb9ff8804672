"""Host (DNS rebinding), Origin and metrics rules, and the rate-limited log, without sockets."""

from __future__ import annotations

import logging
import socket

import pytest

from streamcap.server.access import (
    host_allowed,
    is_loopback,
    metrics_allowed,
    origin_allowed,
    split_host,
)
from streamcap.server.ratelog import RateLimitedLog


@pytest.mark.parametrize(
    "header",
    [
        "127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "app.localhost:1",
        "10.1.2.3:8765", "[fe80::1]", None,
    ],
)  # fmt: skip
def test_hosts_a_rebinding_attack_cannot_use_are_served(header: str | None) -> None:
    assert host_allowed(header, "127.0.0.1")


@pytest.mark.parametrize(
    "header", ["evil.example:8765", "evil.example", "127.0.0.1.evil.example", "", "a b", "x:y"]
)
def test_other_names_are_refused_on_a_loopback_server(header: str) -> None:
    assert not host_allowed(header, "127.0.0.1")


def test_allow_host_names_and_domains_and_the_bound_name() -> None:
    assert host_allowed("captions.example:443", "127.0.0.1", ["captions.example"])
    assert host_allowed("CAPTIONS.EXAMPLE.", "127.0.0.1", ["captions.example"])
    assert host_allowed("a.b.example.com", "127.0.0.1", [".example.com"])
    assert host_allowed("example.com", "127.0.0.1", [".example.com"])
    assert not host_allowed("badexample.com", "127.0.0.1", [".example.com"])
    assert host_allowed("anything.example", "127.0.0.1", ["*"])
    assert host_allowed("studio.lan:8765", "studio.lan")


def test_machine_name_only_when_listening_beyond_this_machine() -> None:
    me = socket.gethostname()
    if is_loopback(me) or not me:
        pytest.skip("this machine's name is a loopback name")
    assert host_allowed(f"{me}:8765", "0.0.0.0")
    assert not host_allowed(f"{me}:8765", "127.0.0.1")


def test_split_host() -> None:
    assert split_host("Example.COM:80") == "example.com"
    assert split_host("[::1]:8765") == "::1"
    assert split_host("host:notaport") is None
    assert split_host("user@host") is None


def test_origin_rule() -> None:
    assert origin_allowed([], ["x"], ())
    assert origin_allowed(["http://127.0.0.1:8765"], ["127.0.0.1:8765"], ())
    assert not origin_allowed(["http://evil.example"], ["127.0.0.1:8765"], ())
    assert origin_allowed(
        ["https://studio.example"], ["127.0.0.1:8765"], ["https://studio.example"]
    )
    assert origin_allowed(["http://evil.example"], ["127.0.0.1:8765"], ["*"])
    assert not origin_allowed(["http://a", "http://b"], ["a"], ["*"])


def test_metrics_rule() -> None:
    assert metrics_allowed(False, False, "127.0.0.1", "127.0.0.1")
    assert metrics_allowed(False, False, "0.0.0.0", "127.0.0.1")
    assert not metrics_allowed(False, False, "0.0.0.0", "192.0.2.7")
    assert not metrics_allowed(False, True, "127.0.0.1", "127.0.0.1")  # the token decides
    assert metrics_allowed(True, True, "0.0.0.0", "192.0.2.7")


def test_rate_limited_log(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t.rl"), interval_s=10, burst=3, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "t.rl"):
        written = [rl.info("refused:auth", "refused: %s", "auth") for _ in range(1000)]
        assert written.count(True) == 3
        assert rl.info("refused:origin", "refused: origin")  # another kind has its own budget
        now[0] = 10.0
        assert rl.info("refused:auth", "refused: %s", "auth")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5
    assert lines[-1] == "refused: auth (997 more like this not logged)"
