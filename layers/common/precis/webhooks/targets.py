"""Safe webhook targets: which URLs an endpoint may have, which addresses a delivery may connect to, and the POST.

A URL is checked when it is registered (`check_url`: a refusal is a 422) and again, with its host resolved, at each
delivery (`vet`: a refusal is a recorded failure). The sender connects to an address `vet` returned, never looking the
host up twice, so a name that answers public then private (DNS rebinding) cannot reach the inside.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from http.client import HTTPConnection, HTTPException
from typing import Any
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
EXCERPT_BYTES = 256
TIMEOUT_S = 10.0

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# getaddrinfo's shape: (host, port, family, type) -> [(family, type, proto, canonname, sockaddr)].
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

# The instance-metadata service (IMDS) and its IPv6 address on Nitro instances: named apart for a clearer refusal.
METADATA = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fd00:ec2::254/128"))
# IPv6 prefixes that carry an IPv4 address a gateway may forward to: NAT64 (well-known and local-use) and 6to4.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_6TO4 = ipaddress.ip_network("2002::/16")
# A host whose last label is a number is an IPv4 address to the WHATWG URL parser and to inet_aton (decimal, octal
# and hex parts, fewer than four of them): `2130706433`, `0x7f.1` and `017700000001` are all 127.0.0.1.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
# A host name as DNS spells it (after IDNA): letters, digits, hyphens and underscores in dot-separated labels.
_NAME = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)(\.(?!-)[a-z0-9_-]{1,63}(?<!-))*\.?$")


class TargetError(Exception):
    """A delivery target cannot be used; the message says what is wrong."""


class RefusedTarget(TargetError):
    """The URL or an address its host resolves to is not allowed: a 422 at registration, a failure at delivery."""


class Unreachable(TargetError):
    """The target could not be reached (no address, no connection, timeout): a failure to retry."""


@dataclass(frozen=True)
class Target:
    """A checked URL, split for connecting: the host as written (the Host header and TLS's name), port, path."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


@dataclass(frozen=True)
class Vetted:
    """A target and the addresses its host resolved to, every one allowed: connect to these, look nothing up again."""

    target: Target
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class Response:
    """What a receiver answered: its status and at most EXCERPT_BYTES of its body (nothing more is read)."""

    status: int
    excerpt: str
    location: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str | None:
        """Why the delivery failed (None when it did not): a redirect is a failure, never followed."""
        if self.ok:
            return None
        if 300 <= self.status < 400:
            return f"HTTP {self.status}: redirects are not followed (Location: {self.location or '-'})"
        return f"HTTP {self.status}"


def address_refusal(address: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why a delivery may not connect to `address` (None: it may): the kind of range it is in."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and any(address in net for net in _NAT64):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            why = address_refusal(embedded, allow_loopback=allow_loopback)
            return f"{why} (inside {address})" if why else None
    if any(address in net for net in METADATA):
        return f"{address} is in the instance-metadata range"
    if address.is_loopback:
        return None if allow_loopback else f"{address} is a loopback address"
    for kind in ("link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return f"{address} is a {kind.replace('_', '-')} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _literal(host: str) -> IPAddress | None:
    """The address a host names literally (IPv6, or IPv4 in any form inet_aton takes), None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not _NUMERIC_LABEL.match(host.rstrip(".").rsplit(".", 1)[-1]):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))
    except OSError:
        raise RefusedTarget(f"host {host!r} is neither a name nor an IPv4 address") from None


def _ascii_name(host: str) -> str:
    """The host as DNS and the Host header spell it (IDNA), or RefusedTarget for characters no name holds."""
    try:
        ascii_host = host.encode("idna").decode("ascii").lower() if not host.isascii() else host
    except UnicodeError:
        raise RefusedTarget(f"host {host!r} is not a valid name") from None
    if not _NAME.match(ascii_host):
        raise RefusedTarget(f"host {host!r} is not a valid name")
    return ascii_host


def check_url(url: str, *, allow_http_local: bool = False) -> Target:
    """Check an endpoint's URL as registered: absolute https (http too when allow_http_local), no credentials, a
    host that is not a literal private, loopback, link-local, metadata or reserved address; else RefusedTarget."""
    if len(url) > MAX_URL_LENGTH:
        raise RefusedTarget(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(c <= " " or c == "\x7f" for c in url):
        raise RefusedTarget("the URL holds whitespace or control characters")
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http_local else ("https",)
    if parts.scheme.lower() not in schemes:
        raise RefusedTarget(f"the URL's scheme must be {' or '.join(schemes)}, not {parts.scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise RefusedTarget("the URL may not hold a user name or password")
    host = (parts.hostname or "").lower()
    if not host:
        raise RefusedTarget("the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise RefusedTarget("the URL's port is not a number from 1 to 65535") from None
    if port is None:
        port = 443 if parts.scheme.lower() == "https" else 80
    elif port == 0:
        raise RefusedTarget("the URL's port is not a number from 1 to 65535")
    literal = _literal(host)
    if literal is None:
        host = _ascii_name(host)
    else:
        if "%" in host:
            raise RefusedTarget(f"host {host!r} names a network interface")
        if literal.version == 4 and host.rstrip(".") != str(literal):
            raise RefusedTarget(f"host {host!r} writes the IPv4 address {literal} in a non-standard form")
        why = address_refusal(literal, allow_loopback=allow_http_local)
        if why:
            raise RefusedTarget(f"refused host: {why}")
    path = parts.path or "/"
    return Target(url, parts.scheme.lower(), host, port, f"{path}?{parts.query}" if parts.query else path)


def vet(url: str, *, allow_http_local: bool = False, resolver: Resolver = socket.getaddrinfo) -> Vetted:
    """Check `url` and resolve its host now; refuse when ANY address it resolves to is refused (one bad answer
    among good ones is how a rebinding name is built). The addresses returned are the only ones to connect to."""
    target = check_url(url, allow_http_local=allow_http_local)
    try:
        answers = resolver(target.host, target.port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Unreachable(f"host {target.host!r} does not resolve: {exc}") from None
    addresses: list[str] = []
    for answer in answers:
        text = str(answer[4][0])
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise RefusedTarget(f"host {target.host!r} resolved to {text!r}, not an address") from None
        why = address_refusal(address, allow_loopback=allow_http_local)
        if why:
            raise RefusedTarget(f"host {target.host!r} resolves to a refused address: {why}")
        if text not in addresses:
            addresses.append(text)
    if not addresses:
        raise Unreachable(f"host {target.host!r} resolves to no address")
    return Vetted(target, tuple(addresses))


class _PinnedConnection(HTTPConnection):
    """HTTP to a vetted address, with the URL's host in the Host header."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTLSConnection(_PinnedConnection):
    """HTTPS to a vetted address: SNI and the certificate check name the URL's host, not the address."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, address, timeout)
        self.context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


def post(
    vetted: Vetted,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout: float = TIMEOUT_S,
    excerpt_bytes: int = EXCERPT_BYTES,
    tls: ssl.SSLContext | None = None,
) -> Response:
    """POST `body` to a vetted target at one of its addresses (the next only when a connection fails), within
    `timeout` seconds in all; never follows a redirect; reads at most `excerpt_bytes` of the answer."""
    target = vetted.target
    failures = []
    for address in vetted.addresses:
        if target.scheme == "https":
            conn: _PinnedConnection = _PinnedTLSConnection(
                target.host, target.port, address, timeout, tls or _default_tls()
            )
        else:
            conn = _PinnedConnection(target.host, target.port, address, timeout)
        try:
            conn.connect()
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            failures.append(f"{address}: {exc}")
            continue
        # The socket's timeout bounds each read; this bounds the whole exchange (a receiver dripping its headers).
        expired = threading.Event()
        deadline = threading.Timer(timeout, _shut, (conn.sock, expired))
        deadline.start()
        try:
            conn.request("POST", target.path, body=body, headers={**headers, "Connection": "close"})
            answer = conn.getresponse()
            excerpt = answer.read(excerpt_bytes) if excerpt_bytes > 0 else b""
            return Response(answer.status, excerpt.decode("utf-8", "replace"), answer.getheader("Location"))
        except (OSError, HTTPException) as exc:
            why = f"timed out after {timeout:g} s" if expired.is_set() or isinstance(exc, TimeoutError) else exc
            raise Unreachable(f"{target.host} ({address}): {why}") from None
        finally:
            deadline.cancel()
            conn.close()
    raise Unreachable(f"{target.host}: no connection ({'; '.join(failures)})")


@lru_cache(maxsize=1)
def _default_tls() -> ssl.SSLContext:
    """The system's trust store and hostname checks, loaded once a cold start (loading it is milliseconds a call)."""
    return ssl.create_default_context()


def _shut(sock: socket.socket | None, expired: threading.Event) -> None:
    expired.set()
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
