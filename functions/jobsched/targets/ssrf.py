"""Which addresses an HTTP target may reach.

A webhook URL is tenant input, so without a guard it could aim the scheduler at its own
VPC, the instance metadata service or loopback. `DestinationPolicy` resolves the host once,
refuses the request if ANY resolved address is internal, and hands back the vetted
addresses; the HTTP client connects to those (no second lookup), which defeats DNS
rebinding. The allow-list exists for deployments whose receivers really are internal."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from ..domain.errors import PermanentError, RetryableError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Iterable[str]]  # (host, port) -> IP address strings

DEFAULT_PORTS = {"http": 80, "https": 443}


def system_resolver(host: str, port: int) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _net(cidr: str) -> Network:
    return ipaddress.ip_network(cidr)


# Most specific first, so the reason names the metadata endpoint rather than "link-local".
_V4_REFUSED: list[tuple[Network, str]] = [
    (_net("169.254.169.254/32"), "the instance metadata endpoint"),
    (_net("169.254.170.2/32"), "the container credentials endpoint"),
    (_net("169.254.170.23/32"), "the pod identity endpoint"),
    (_net("0.0.0.0/8"), "'this network' (0.0.0.0/8)"),
    (_net("10.0.0.0/8"), "private (RFC 1918)"),
    (_net("100.64.0.0/10"), "shared address space (CGNAT, 100.64.0.0/10)"),
    (_net("127.0.0.0/8"), "loopback"),
    (_net("169.254.0.0/16"), "link-local"),
    (_net("172.16.0.0/12"), "private (RFC 1918)"),
    (_net("192.0.0.0/24"), "IETF protocol assignments"),
    (_net("192.0.2.0/24"), "documentation"),
    (_net("192.168.0.0/16"), "private (RFC 1918)"),
    (_net("198.18.0.0/15"), "benchmarking"),
    (_net("198.51.100.0/24"), "documentation"),
    (_net("203.0.113.0/24"), "documentation"),
    (_net("224.0.0.0/4"), "multicast"),
    (_net("255.255.255.255/32"), "broadcast"),
    (_net("240.0.0.0/4"), "reserved"),
]

# Judged before embedded-IPv4 forms: :: and ::1 also sit inside ::/96.
_V6_FIRST: list[tuple[Network, str]] = [
    (_net("fd00:ec2::254/128"), "the instance metadata endpoint"),
    (_net("fd00:ec2::23/128"), "the pod identity endpoint"),
    (_net("::/128"), "unspecified"),
    (_net("::1/128"), "loopback"),
]

_V6_REFUSED: list[tuple[Network, str]] = [
    (_net("fe80::/10"), "link-local"),
    (_net("fec0::/10"), "site-local"),
    (_net("fc00::/7"), "unique-local"),
    (_net("ff00::/8"), "multicast"),
    (_net("64:ff9b:1::/48"), "local-use NAT64"),
    (_net("100::/64"), "discard-only"),
    (_net("2001::/23"), "IETF protocol assignments"),
    (_net("2001:db8::/32"), "documentation"),
    (_net("3fff::/20"), "documentation"),
]

_GLOBAL_UNICAST_V6 = _net("2000::/3")
_COMPAT_V6 = _net("::/96")
_NAT64_V6 = _net("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """IPv6 forms that deliver to an IPv4 address, which is what must be judged."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip in _COMPAT_V6:
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64_V6:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    return None


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    for network, reason in _V4_REFUSED:
        if ip in network:
            return reason
    # Backstop for ranges added to ipaddress after this list was written.
    return None if ip.is_global else "not globally routable"


def refusal_reason(ip: IPAddress) -> str | None:
    """Why `ip` must not be reached from the scheduler, or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_reason(ip)
    for network, reason in _V6_FIRST:
        if ip in network:
            return reason
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        form, v4 = embedded
        v4_reason = _v4_reason(v4)
        return f"{form} {v4}, {v4_reason}" if v4_reason else None
    for network, reason in _V6_REFUSED:
        if ip in network:
            return reason
    if ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return None if ip.is_global else "not globally routable"


_LEGACY_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")


def legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Parse the inet_aton forms that resolvers accept but `ipaddress` does not:
    "2130706433", "127.1", "0x7f.1", "0177.0.0.1". Judging these as the address they
    denote keeps the verdict independent of which resolver is plugged in."""
    labels = host.split(".")
    if not 1 <= len(labels) <= 4 or not all(_LEGACY_PART.fullmatch(label) for label in labels):
        return None
    values = [
        int(label, 16) if label[:2] in ("0x", "0X") else int(label, 8 if label[0] == "0" else 10)
        for label in labels
    ]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for value in head:
        number = number * 256 + value
    return ipaddress.IPv4Address(number * 256 ** (4 - len(head)) + last)


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return legacy_ipv4(host)


@dataclass(frozen=True)
class Destination:
    """A vetted URL: where to connect (`addresses`) and what to call the host on the wire."""

    scheme: str
    host: str  # ASCII, lower case, no brackets, no trailing dot: Host header, SNI, cert check
    port: int
    addresses: tuple[str, ...]
    target: str  # request target: path and query

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if DEFAULT_PORTS[self.scheme] == self.port else f"{name}:{self.port}"


class DestinationPolicy:
    """`allow` entries are CIDRs ("10.0.0.0/8", "127.0.0.1") or host names ("receiver.internal")."""

    def __init__(self, allow: Sequence[str] = (), *, resolver: Resolver | None = None) -> None:
        self._networks: list[Network] = []
        self._names: set[str] = set()
        for entry in allow:
            try:
                self._networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                name = entry.strip().rstrip(".").lower()
                if not name or "/" in name or ":" in name:
                    raise ValueError(
                        f"allow-list entry '{entry}' is neither a CIDR nor a host name"
                    ) from None
                self._names.add(name)
        self._resolver = resolver or system_resolver

    def check(self, url: str) -> list[str]:
        """The addresses `url` may be reached at; raises PermanentError("Refused") otherwise."""
        return list(self.destination(url).addresses)

    def destination(self, url: str) -> Destination:
        scheme, host, port, target = _split(url)
        return Destination(scheme, host.rstrip("."), port, tuple(self.vet(host, port)), target)

    def vet(self, host: str, port: int) -> list[str]:
        name = host.rstrip(".").lower()
        literal = literal_address(name)
        addresses = [literal] if literal is not None else self._resolve(host, port)
        if name not in self._names:
            for ip in addresses:
                if self._allowed(ip):
                    continue
                reason = refusal_reason(ip)
                if reason is not None:
                    raise PermanentError(
                        f"destination '{host}' refused: {ip} is {reason}", error_class="Refused"
                    )
        return list(dict.fromkeys(str(ip) for ip in addresses))

    def _allowed(self, ip: IPAddress) -> bool:
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        return any(c.version == n.version and c in n for c in candidates for n in self._networks)

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            raw = list(self._resolver(host, port))
        except UnicodeError as exc:
            raise PermanentError(f"host '{host}' is not a valid name: {exc}", error_class="BadUrl") from exc
        except OSError as exc:
            raise RetryableError(f"could not resolve '{host}': {exc}", error_class="DNS") from exc
        if not raw:
            raise RetryableError(f"'{host}' resolved to no addresses", error_class="DNS")
        try:
            return [ipaddress.ip_address(address) for address in raw]
        except ValueError as exc:
            raise RetryableError(
                f"resolver returned a non-address for '{host}': {exc}", error_class="DNS"
            ) from exc


def _split(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise PermanentError(f"invalid URL '{url}': {exc}", error_class="BadUrl") from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise PermanentError(f"URL scheme '{scheme}' is not http or https", error_class="BadUrl")
    if parts.username is not None or parts.password is not None:
        raise PermanentError("URLs with credentials are refused", error_class="Refused")
    host = parts.hostname or ""
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise PermanentError(f"host '{host}' is not a valid name: {exc}", error_class="BadUrl") from exc
    if not host or not re.fullmatch(r"[a-z0-9._:%-]+", host):
        raise PermanentError(f"URL '{url}' has no valid host", error_class="BadUrl")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    # http.client sends only ASCII; keep existing escapes and reserved characters as they are.
    target = quote(target, safe="/?#[]@!$&'()*+,;=:%~")
    return scheme, host, port or DEFAULT_PORTS[scheme], target
