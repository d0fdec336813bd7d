"""Which addresses a task's downloads may come from: public hosts only, never the lab's own network.

A task's files are fetched by the sandbox host, which sits on the lab's network: a URL naming
127.0.0.1, a private or link-local address (a cloud's metadata service at 169.254.169.254) or a name
such as `localhost` would have the host read the lab's own services (the web app, Redis, a VNC port)
into a sandbox, where the agent and whoever watches it see them. So:

- `literal_refusal(url)` is the check made where a task is imported or uploaded, without the
  network: the URL's own host (an IP literal in any notation `getaddrinfo` accepts: `127.1`,
  `2130706433`, `0x7f.0.0.1`, `[::ffff:127.0.0.1]`; `localhost` and the names of local networks:
  `.localhost`, `.local`, `.localdomain`, `.internal`, `.lan`, `.home.arpa`).
- `address_refusal(ip)` is the check the sandbox host makes at fetch time on every address the URL's
  name resolves to, and on every redirect.

Refused: loopback, private (RFC 1918, ULA fd00::/8), link-local, multicast, unspecified, reserved,
site-local, shared (100.64.0.0/10) and every other non-global address, IPv6 forms that carry an IPv4
address (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) judged by that address.
An operator may let downloads reach networks of the lab's own (a file server at 10.1.2.3) with
`SANDBOX_FETCH_ALLOW_NETS` (CIDRs, comma-separated; empty by default); the mirror the operator
configures (SANDBOX_FETCH_MIRROR) is trusted and is not checked.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_ENV = "SANDBOX_FETCH_ALLOW_NETS"
"""The operator's setting: networks (CIDRs, comma-separated) downloads may reach though not public."""
LOCAL_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".lan", ".home.arpa")
"""Names that belong to a local network by convention or RFC (6761, 6762, 8375), never the Internet."""
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LEGACY_V4 = re.compile(r"[0-9a-fx.]+")
"""What inet_aton may read as an IPv4 address (127.1, 2130706433, 0x7f.1, 0177.0.0.1)."""


def allowed_networks(text: str | None = None) -> tuple[IPNetwork, ...]:
    """The networks `SANDBOX_FETCH_ALLOW_NETS` (or `text`) allows; ValueError naming a bad entry."""
    raw = os.environ.get(ALLOW_ENV, "") if text is None else text
    nets = []
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(
                f"{ALLOW_ENV}: {item!r} is not a network (CIDR such as 10.1.2.0/24): {exc}"
            ) from None
    return tuple(nets)


def _embedded_v4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries and how (mapped, NAT64, 6to4), if it carries one."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    return None


def _kind(ip: IPAddress) -> str | None:
    """The kind of non-public address `ip` is, None if it is public."""
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),
        ("reserved", ip.is_reserved),
    )
    for name, hit in checks:
        if hit:
            return name
    return None if ip.is_global else "non-public"


def address_refusal(ip: IPAddress | str, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Why downloads may not use `ip` ("127.0.0.1 is a loopback address"), None if they may."""
    ip = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if any(ip.version == net.version and ip in net for net in allow):
        return None
    inner = _embedded_v4(ip)
    if inner is not None:
        v4, how = inner
        if any(v4 in net for net in allow if net.version == 4):
            return None
        kind = _kind(v4)
        shown = f"::ffff:{v4}" if how == "IPv4-mapped" else str(ip)
        return f"{shown} is {_a(how)} form of {v4}, {_a(kind)} address" if kind else None
    kind = _kind(ip)
    return f"{ip} is {_a(kind)} address" if kind else None


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiouAEIOU' else 'a'} {word}"


def literal_ip(host: str) -> IPAddress | None:
    """`host` as an IP address if it is one in any notation the resolver accepts, else None."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if _LEGACY_V4.fullmatch(bare.lower()):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def host_refusal(host: str, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Why `host` (a URL's host, without the network) cannot be a download's, None if it may be."""
    name = host.lower().rstrip(".")
    if not name:
        return "the URL names no host"
    ip = literal_ip(name)
    if ip is not None:
        return address_refusal(ip, allow)
    if name == "localhost" or name.endswith(LOCAL_SUFFIXES):
        return f"{name} is a name of the local machine or network"
    return None


def literal_refusal(url: str, allow: Sequence[IPNetwork] | None = None) -> str | None:
    """Why `url` cannot be a task's download, judged from its text (no DNS), None if it may be.

    `allow` defaults to the operator's `SANDBOX_FETCH_ALLOW_NETS`."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "only http(s) URLs can be downloaded"
    if parts.username is not None or parts.password is not None:
        return "a download URL cannot carry credentials (user@host)"
    return host_refusal(host, allowed_networks() if allow is None else allow)


def download_refusal(url: str, field: str = "url") -> str | None:
    """The error for a task's download `url` (named as `field`) that is refused, None if it may be
    fetched: what importers raise, naming the field (the operator's allowance applies)."""
    try:
        why = literal_refusal(url)
    except ValueError as exc:  # the operator's SANDBOX_FETCH_ALLOW_NETS is malformed
        why = str(exc)
    if why is None:
        return None
    return f"{field} {url!r} is refused: {why} (a task's files come from public hosts only)"
