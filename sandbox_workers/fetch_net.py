"""Downloading a task's file from its own URL, from public addresses only, whatever DNS answers.

`download(url, policy=AddressPolicy(...))` resolves the URL's host once, checks every address it
resolves to (`agent_core.tasks.public_urls.address_refusal`: loopback, private, link-local, multicast,
unspecified, reserved, and the IPv6 forms of such IPv4 addresses) and connects to a checked address
itself: nothing looks the name up a second time, so a name that answers a public address to the check
and 127.0.0.1 to the connection (DNS rebinding) cannot swap it. TLS still verifies the certificate
against the name. Every redirect is a new URL, checked the same way (at most MAX_REDIRECTS).
`policy=None` checks nothing: the operator's own mirror (SANDBOX_FETCH_MIRROR), which may be on
loopback. Proxy settings (http_proxy) are not used: a proxy would make the connection on our behalf to
an address we never checked; a lab without direct access to the files puts them in its mirror.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from agent_core.tasks.public_urls import IPNetwork, address_refusal

MAX_REDIRECTS = 5
USER_AGENT = "flywheel-sandbox-host"
Resolver = Callable[[str, int], Sequence[str]]


class DownloadRefused(OSError):
    """The URL, or a redirect, leads to an address downloads may not use; the message says which."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (the system's resolver, once)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class AddressPolicy:
    """Which addresses a download may connect to: public ones, and the operator's `allow` networks."""

    allow: tuple[IPNetwork, ...] = ()
    resolver: Resolver = system_resolver

    def addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses of `host`; DownloadRefused if the name or ANY of its addresses is refused
        (a name with one private address among public ones is a name to refuse, not to pick from).
        Names are judged by what they resolve to here (`localhost` by 127.0.0.1), IP literals in any
        notation by themselves."""
        if not host:
            raise DownloadRefused("refused: the URL names no host")
        found = list(self.resolver(host, port))
        if not found:
            raise OSError(f"cannot resolve {host}: no address")
        for address in found:
            why = address_refusal(ipaddress.ip_address(address), self.allow)
            if why:
                shown = f"{host} resolves to {address}: " if host.strip("[]") != address else ""
                raise DownloadRefused(f"refused: {shown}{why}")
        return found


def _connect(addresses: Sequence[str], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of `addresses` (IP literals: no lookup) that answers."""
    error: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout=timeout)
        except OSError as exc:
            error = exc
    raise error or OSError("no address to connect to")


class _PinnedHTTP(http.client.HTTPConnection):
    """HTTP to `host` (its name in the request) over a connection to one of the checked addresses."""

    def __init__(self, host: str, port: int, addresses: Sequence[str], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = list(addresses)

    def connect(self) -> None:
        self.sock = _connect(self.addresses, self.port, self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS likewise; the certificate is verified against the name, not the address."""

    def __init__(self, host: str, port: int, addresses: Sequence[str], timeout: float) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.addresses = list(addresses)

    def connect(self) -> None:
        sock = _connect(self.addresses, self.port, self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def download(url: str, *, timeout: float, max_bytes: int, policy: AddressPolicy | None) -> bytes:
    """The body of a GET of `url` (redirects followed and re-checked); OSError (DownloadRefused for an
    address the policy refuses, "HTTP <code>" for an error status), ValueError past `max_bytes`."""
    deadline = time.monotonic() + timeout
    for _hop in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise DownloadRefused(f"refused: {url} is not an http(s) URL")
        host = parts.hostname or ""
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as exc:
            raise OSError(f"bad URL {url}: {exc}") from None
        addresses = policy.addresses(host, port) if policy is not None else [host]
        remaining = max(deadline - time.monotonic(), 0.1)
        cls = _PinnedHTTPS if scheme == "https" else _PinnedHTTP
        conn = cls(host, port, addresses, timeout=remaining)
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", target, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
            response = conn.getresponse()
            if response.status in (301, 302, 303, 307, 308):
                location = response.getheader("Location")
                if not location:
                    raise OSError(f"HTTP {response.status} without a Location")
                url = urljoin(url, location)
                continue
            if response.status != 200:
                raise OSError(f"HTTP {response.status}")
            length = response.getheader("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise ValueError(f"larger than {max_bytes} bytes")
            data = response.read(max_bytes + 1)
        except (http.client.HTTPException, ssl.SSLError) as exc:
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if len(data) > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        return data
    raise OSError(f"more than {MAX_REDIRECTS} redirects")
