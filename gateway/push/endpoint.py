"""Which push endpoints a gateway may call, against server-side request forgery: the URL check
when a subscription is defined, and the address check when a connection is made."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_CHARS = 2048
NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
# The authority of a URL as written, before a parser normalises away an empty userinfo.
AUTHORITY = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
# A last label a resolver reads as a number makes the whole host an IPv4 address in some form.
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class EndpointRefused(Exception):
    """The SSRF policy refuses an endpoint or an address; the message says why."""


@dataclass(frozen=True)
class EndpointPolicy:
    """The hosts and networks push endpoints may be on (the gateway's push_* settings)."""

    allowed_hosts: tuple[str, ...]
    allowed_cidrs: tuple[IPNetwork, ...]
    allow_http: bool

    @classmethod
    def of(cls, hosts: Sequence[str], cidrs: Sequence[str], allow_http: bool) -> EndpointPolicy:
        """The policy from settings' texts; ValueError names a bad host pattern or network."""
        patterns = tuple(host_pattern(text) for text in hosts if text.strip())
        networks = tuple(ipaddress.ip_network(text.strip()) for text in cidrs if text.strip())
        return cls(patterns, networks, allow_http)

    @property
    def enabled(self) -> bool:
        """Whether any endpoint can be admitted at all."""
        return bool(self.allowed_hosts or self.allowed_cidrs)


def host_pattern(text: str) -> str:
    """An allowed-host pattern, normalised: an exact name or `*.suffix`."""
    wildcard = text.strip().startswith("*.")
    name = normal_host(text.strip()[2:] if wildcard else text.strip())
    if is_ip_text(name) or not all(HOST_LABEL.match(label) for label in name.split(".")):
        raise ValueError(f"not a host name pattern (IP networks go in the CIDR list): {text!r}")
    return f"*.{name}" if wildcard else name


def normal_host(host: str) -> str:
    """A host name as compared: IDNA-encoded, lower-case, without the trailing dot."""
    try:
        encoded = yarl.URL.build(scheme="https", host=host.rstrip(".")).raw_host or ""
    except ValueError as exc:
        raise ValueError(f"not a host name: {host!r}") from exc
    return encoded.lower()


def is_ip_text(host: str) -> bool:
    """Whether a host is an IP address as written."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether a normalised host name matches an exact name or a `*.suffix` (one or more labels)."""
    return any(
        host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern
        for pattern in patterns
    )


def admit_endpoint(url: str, policy: EndpointPolicy) -> yarl.URL:
    """The endpoint's URL when the policy admits it; EndpointRefused says why it does not."""
    if not policy.enabled:
        raise EndpointRefused("push is not enabled on this gateway")
    if len(url) > MAX_URL_CHARS:
        raise EndpointRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    parsed = parse_url(url)
    check_scheme(parsed, policy)
    check_url_parts(url, parsed)
    host = normal_host(parsed.raw_host or "")
    address = ip_literal(host)
    if address is None:
        if not host_allowed(host, policy.allowed_hosts):
            raise EndpointRefused(f"the host {host} is not in push_allowed_hosts")
    elif not in_allowed_cidr(address, policy):
        raise EndpointRefused(
            f"the address {address} ({address_class(address)}) is not in push_allowed_cidrs"
        )
    return parsed


def parse_url(url: str) -> yarl.URL:
    """The URL parsed as the HTTP client will parse it; EndpointRefused when it does not parse."""
    try:
        parsed = yarl.URL(url)
        parsed.port  # noqa: B018 - an out-of-range port only raises when read
    except (ValueError, TypeError) as exc:
        raise EndpointRefused(f"not a valid URL: {exc}") from exc
    return parsed


def check_scheme(parsed: yarl.URL, policy: EndpointPolicy) -> None:
    """https always; http only when the gateway allows it."""
    scheme = parsed.scheme.lower()
    if scheme == "http" and not policy.allow_http:
        raise EndpointRefused("plain http:// endpoints are not allowed on this gateway")
    if scheme not in ("https", "http"):
        raise EndpointRefused(f"the scheme {scheme or '(none)'!r} is not allowed: use https")


def check_url_parts(url: str, parsed: yarl.URL) -> None:
    """No credentials in the URL, no fragment, a host."""
    authority = AUTHORITY.match(url)
    if authority is None or "@" in authority.group(1):
        raise EndpointRefused("the URL must not carry credentials (use headers)")
    if "#" in url:
        raise EndpointRefused("the URL must not have a fragment")
    if not parsed.raw_host:
        raise EndpointRefused("the URL has no host")


def ip_literal(host: str) -> IPAddress | None:
    """The address when the host is an IP literal; EndpointRefused for non-canonical numeric forms
    (octal, hex, a single number) that resolvers would still read as an address."""
    if "%" in host:
        raise EndpointRefused("scoped IPv6 addresses are not allowed")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise EndpointRefused(f"not a valid IPv6 address: {host}") from exc
    if not NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
        return None
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        address = None
    if address is None or str(address) != host:
        raise EndpointRefused(f"the host {host} is not a canonical IPv4 address (a.b.c.d)")
    return address


def connect_check(url: yarl.URL, policy: EndpointPolicy) -> None:
    """Check an endpoint on the gateway that sends to it, whose policy may differ from that of the
    gateway that admitted it; for an IP-literal host the only check, since the HTTP client skips
    the resolver for it."""
    admit_endpoint(str(url), policy)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 IPv6 address leads to."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64_PREFIX:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def in_allowed_cidr(address: IPAddress, policy: EndpointPolicy) -> bool:
    """Whether the address, or the IPv4 address it embeds, is in an allowed network."""
    candidates = [address, embedded_ipv4(address)]
    return any(
        candidate is not None and candidate.version == network.version and candidate in network
        for candidate in candidates
        for network in policy.allowed_cidrs
    )


def is_public(address: IPAddress) -> bool:
    """Global unicast: not loopback, private, link-local, shared (CGNAT), multicast or reserved."""
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_unspecified
    )


def address_allowed(address: str, policy: EndpointPolicy) -> bool:
    """Whether the gateway may connect to an address: public, or inside an allowed network."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if in_allowed_cidr(parsed, policy):
        return True
    inner = embedded_ipv4(parsed)
    return is_public(parsed if inner is None else inner)


def address_class(address: IPAddress) -> str:
    """A short name for why an address is not public, for refusal messages."""
    inner = embedded_ipv4(address)
    target = address if inner is None else inner
    for name, flagged in (
        ("unspecified", target.is_unspecified),
        ("loopback", target.is_loopback),
        ("link-local", target.is_link_local),
        ("multicast", target.is_multicast),
        ("shared CGNAT", target in ipaddress.IPv4Network("100.64.0.0/10")),
        ("private", target.is_private),
        ("reserved", target.is_reserved),
    ):
        if flagged:
            return name
    return "public"


def same_origin(a: yarl.URL, b: yarl.URL) -> bool:
    """Whether two URLs have the same scheme, host and port (redirect checks)."""
    return (
        a.scheme.lower() == b.scheme.lower()
        and (a.raw_host or "").lower().rstrip(".") == (b.raw_host or "").lower().rstrip(".")
        and a.port == b.port
    )


class GuardedResolver(AbstractResolver):
    """A DNS resolver for push connections that keeps only the answers the policy allows, so that
    a name cannot lead the gateway to an internal address (checked at each connect)."""

    def __init__(self, policy: EndpointPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The allowed answers for `host`; OSError naming the refused ones when none is left."""
        if self._inner is None:
            # aiohttp's default resolver binds the running loop when built.
            self._inner = DefaultResolver()
        answers = await self._inner.resolve(host, port, family)
        allowed = [answer for answer in answers if address_allowed(answer["host"], self._policy)]
        if not allowed:
            refused = ", ".join(sorted({answer["host"] for answer in answers})) or "no address"
            # With an errno, aiohttp's connector error shows the reason in its message.
            raise OSError(errno.EACCES, f"push endpoint host {host} resolves only to refused "
                                        f"addresses: {refused}")
        return allowed

    async def close(self) -> None:
        """Close the inner resolver."""
        if self._inner is not None:
            await self._inner.close()
