"""Who may talk to the server at all: Host, Origin and metrics rules (pure functions).

The tokens say *who* a client is; these rules stop a browser from being turned against a server
it can reach:

- **Host** (DNS rebinding): a page on `evil.example` whose name an attacker re-points at
  127.0.0.1 reaches the server with `Host: evil.example`, and its `Origin` equals that Host, so
  the same-origin rule alone would let it publish and read captions on a server with no tokens.
  A request is served only when its Host names this server: an IP literal (no name to rebind),
  a localhost name, the name the server was bound to, this machine's own name when the server
  listens beyond it, or a name the operator allowed (`--allow-host`).
- **Origin** (cross-site WebSocket hijacking): a browser's handshake is accepted from the
  server's own origin and from `--allow-origin` ones only.
- **Metrics**: `/metrics` tells how busy the server is and which clients it refused; with a
  `--metrics-token` it needs that token, without one it is served to loopback clients only
  when the server listens beyond this machine.
- **Shares** (`AddressShare`): on a side without a token anyone may take its slots, so one
  client address may hold only a share of them and the first comer cannot take them all.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cache
from urllib.parse import urlsplit

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def is_loopback(host: str) -> bool:
    """`host` (a bind address or a name) stays on this machine."""
    host = host.strip("[]").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> str | None:
    """The host name of a `Host` header value (`name`, `name:port`, `[v6]:port`), lower case;
    None when it is not a well-formed host."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/?#@ \t"):
        return None
    try:
        parts = urlsplit(f"//{value}")
        host = parts.hostname
        _ = parts.port  # ValueError on a bad port
    except ValueError:
        return None
    return host or None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@cache
def _machine_names() -> frozenset[str]:
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    return frozenset(n for n in names if n)


def _matches(host: str, pattern: str) -> bool:
    pattern = pattern.strip().lower().rstrip(".")
    if pattern == "*":
        return True
    if pattern.startswith("."):  # ".example.com": the domain and every name under it
        return host == pattern[1:] or host.endswith(pattern)
    return host == pattern


def host_allowed(header: str | None, bind_host: str, allowed: Iterable[str] = ()) -> bool:
    """May a request whose `Host` header is `header` be served by a server bound to
    `bind_host`? See the module docstring; `allowed` holds `--allow-host` names (".example.com"
    for a whole domain, "*" for any)."""
    if header is None:
        return True  # HTTP/1.0 or a hand-written client: not a browser, nothing to rebind
    host = split_host(header)
    if host is None:
        return False
    host = host.rstrip(".")
    if _is_ip(host) or is_loopback(host):
        return True
    bind = bind_host.strip("[]").lower()
    if host == bind:
        return True
    if any(_matches(host, p) for p in allowed):
        return True
    listens_beyond = not is_loopback(bind) if bind else True
    return listens_beyond and host in _machine_names()


def origin_allowed(origins: list[str], hosts: list[str], allowed: Iterable[str]) -> bool:
    """Same-origin (the Origin's host:port equals the request's Host) or an allowed origin.

    `origins` and `hosts` are every value of those headers: no Origin means not a browser (the
    token is the guard); two Origins or two Hosts are refused.
    """
    if not origins:
        return True
    if len(origins) > 1:
        return False
    origin = origins[0]
    allowed = tuple(allowed)
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    return (
        parts.scheme in ("http", "https")
        and len(hosts) == 1
        and parts.netloc.lower() == hosts[0].strip().lower()
    )


def metrics_allowed(token_ok: bool, has_token: bool, bind_host: str, peer_host: str | None) -> bool:
    """`/metrics`: the metrics token when one is set; else open on a loopback-bound server, and
    loopback clients only on a server that listens beyond this machine."""
    if has_token:
        return token_ok
    if is_loopback(bind_host):
        return True
    return peer_host is not None and is_loopback(peer_host)


class AddressShare:
    """Slots of one kind (viewers) held per client address, at most `share` each (None: no
    limit). Pure bookkeeping: the server asks `refusal` and holds a slot while it is used."""

    def __init__(self, share: int | None, what: str, total: int) -> None:
        self.share, self.what, self.total = share, what, total
        self._held: Counter[str] = Counter()

    def held(self, address: str) -> int:
        return self._held[address]

    def refusal(self, address: str) -> str | None:
        """Why `address` may not take one more slot now, or None."""
        n = self._held[address]
        if self.share is None or n < self.share:
            return None
        return (
            f"{address} already holds {n} of the server's {self.total} {self.what}; one address "
            f"may hold {self.share} on a server without a token"
        )

    @contextlib.contextmanager
    def hold(self, address: str) -> Iterator[None]:
        self._held[address] += 1
        try:
            yield
        finally:
            self._held[address] -= 1
            if self._held[address] <= 0:
                del self._held[address]
