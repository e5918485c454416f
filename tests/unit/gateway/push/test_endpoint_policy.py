"""The push endpoint SSRF guard: URLs refused at definition time, resolver answers filtered at
connect time."""

from __future__ import annotations

import socket
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.push.endpoint import (
    EndpointPolicy,
    EndpointRefused,
    GuardedResolver,
    address_allowed,
    admit_endpoint,
    connect_check,
    same_origin,
)

HOOKS = EndpointPolicy.of(["hooks.example.com", "*.example.com"], [], allow_http=False)


def policy(hosts: tuple[str, ...] = (), cidrs: tuple[str, ...] = (),
           allow_http: bool = False) -> EndpointPolicy:
    return EndpointPolicy.of(list(hosts), list(cidrs), allow_http)


def refusal(url: str, rules: EndpointPolicy = HOOKS) -> str:
    with pytest.raises(EndpointRefused) as raised:
        admit_endpoint(url, rules)
    return str(raised.value)


def test_an_https_endpoint_on_an_allowed_host_is_admitted_normalised() -> None:
    admitted = admit_endpoint("https://Hooks.Example.COM./streamgate?x=1", HOOKS)
    assert admitted.host == "hooks.example.com."
    assert admitted.path == "/streamgate"


def test_plain_http_is_refused_unless_the_gateway_allows_it() -> None:
    assert "http://" in refusal("http://hooks.example.com/in")
    allowing = policy(hosts=("hooks.example.com",), allow_http=True)
    assert admit_endpoint("http://hooks.example.com/in", allowing).scheme == "http"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://hooks.example.com/x",
                                 "ftp://hooks.example.com/", "hooks.example.com/x"])
def test_other_schemes_are_refused(url: str) -> None:
    refusal(url)


@pytest.mark.parametrize("url", ["https://a@hooks.example.com/", "https://a:b@hooks.example.com/",
                                 "https://@hooks.example.com/"])
def test_credentials_in_the_url_are_refused(url: str) -> None:
    assert "credentials" in refusal(url)


def test_a_fragment_is_refused() -> None:
    assert "fragment" in refusal("https://hooks.example.com/in#x")


def test_an_over_long_url_is_refused() -> None:
    assert "longer" in refusal("https://hooks.example.com/" + "a" * 2048)


def test_a_host_not_on_the_list_is_refused() -> None:
    assert "push_allowed_hosts" in refusal("https://evil.test/")


def test_a_wildcard_matches_subdomains_at_any_depth_but_not_the_bare_or_a_lookalike_name() -> None:
    wildcard = policy(hosts=("*.example.com",))
    assert admit_endpoint("https://a.b.example.com/", wildcard).host == "a.b.example.com"
    refusal("https://example.com/", wildcard)
    refusal("https://evilexample.com/", wildcard)
    refusal("https://example.com.evil.test/", wildcard)


def test_internationalised_hosts_are_compared_in_their_idna_form() -> None:
    rules = policy(hosts=("bücher.example",))
    assert admit_endpoint("https://BÜCHER.example/", rules).raw_host == "xn--bcher-kva.example"


def test_empty_lists_refuse_every_endpoint() -> None:
    assert "not enabled" in refusal("https://hooks.example.com/", policy())
    assert not policy().enabled


@pytest.mark.parametrize("url", ["https://127.0.0.1/", "https://[::1]/",
                                 "https://[::ffff:127.0.0.1]/", "https://0.0.0.0/",
                                 "https://169.254.169.254/latest/meta-data",
                                 "https://10.0.0.1/", "https://100.64.0.1/", "https://[fe80::1]/",
                                 "https://[64:ff9b::7f00:1]/", "https://[2002:7f00:1::1]/",
                                 "https://8.8.8.8/"])
def test_ip_literals_outside_the_allowed_networks_are_refused(url: str) -> None:
    refusal(url, policy(hosts=("hooks.example.com",), cidrs=("192.0.2.0/24",)))


def test_a_refused_ip_literal_is_named_with_its_address_class() -> None:
    rules = policy(cidrs=("192.0.2.0/24",))
    assert "loopback" in refusal("https://[::ffff:127.0.0.1]/", rules)
    assert "link-local" in refusal("https://169.254.169.254/", rules)


@pytest.mark.parametrize("url", ["https://0177.0.0.1/", "https://2130706433/",
                                 "https://0x7f000001/", "https://0x7f.1/", "https://127.1/",
                                 "https://010.0.0.1/"])
def test_non_canonical_numeric_hosts_are_refused(url: str) -> None:
    rules = policy(hosts=("*.example.com",), cidrs=("0.0.0.0/0",))
    assert "canonical" in refusal(url, rules)


def test_a_private_literal_is_admitted_once_its_network_is_allowed() -> None:
    rules = policy(cidrs=("10.0.0.0/8", "fd00::/8"))
    assert admit_endpoint("https://10.0.0.1:8443/in", rules).port == 8443
    assert admit_endpoint("https://[fd00::5]/in", rules).host == "fd00::5"
    refusal("https://10.0.0.1/", policy(cidrs=("192.0.2.0/24",)))


def test_bad_patterns_and_networks_fail_the_policy_at_start() -> None:
    for hosts, cidrs in ((("*",), ()), (("a.*.com",), ()), (("10.0.0.1",), ()),
                         ((), ("10.0.0.0/33",)), ((), ("10.0.0.1/8",))):
        with pytest.raises(ValueError, match=r"host|network"):
            EndpointPolicy.of(hosts, cidrs, allow_http=False)


def test_the_send_time_check_follows_the_current_settings() -> None:
    admitted = admit_endpoint("https://10.0.0.1/", policy(cidrs=("10.0.0.0/8",)))
    connect_check(admitted, policy(cidrs=("10.0.0.0/8",)))
    with pytest.raises(EndpointRefused):
        connect_check(admitted, policy(cidrs=("192.0.2.0/24",)))


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1",
                                     "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
                                     "240.0.0.1", "255.255.255.255", "::", "::1", "fe80::1",
                                     "fc00::1", "ff02::1", "::ffff:10.0.0.1", "64:ff9b::a00:1",
                                     "2002:c0a8:101::1", "not-an-address"])
def test_non_public_addresses_are_not_connected_to(address: str) -> None:
    assert not address_allowed(address, HOOKS)


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])
def test_public_addresses_are_connected_to(address: str) -> None:
    assert address_allowed(address, HOOKS)


def test_an_allowed_network_lets_its_private_addresses_through() -> None:
    rules = policy(hosts=("svc.internal",), cidrs=("10.0.0.0/8",))
    assert address_allowed("10.9.8.7", rules)
    assert address_allowed("::ffff:10.9.8.7", rules)
    assert not address_allowed("192.168.0.1", rules)


def test_same_origin_compares_scheme_host_and_port() -> None:
    base = yarl.URL("https://hooks.example.com/in")
    assert same_origin(base, yarl.URL("https://HOOKS.example.com:443/other"))
    assert not same_origin(base, yarl.URL("http://hooks.example.com/in"))
    assert not same_origin(base, yarl.URL("https://hooks.example.com:8443/in"))
    assert not same_origin(base, yarl.URL("https://169.254.169.254/in"))


class FakeResolver(AbstractResolver):
    """Answers every name with fixed addresses."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.closed = False

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [ResolveResult(hostname=host, host=address, port=port, family=family, proto=0,
                              flags=0) for address in self.addresses]

    async def close(self) -> None:
        self.closed = True


async def test_the_resolver_keeps_only_allowed_answers() -> None:
    inner = FakeResolver(["10.0.0.5", "93.184.215.14", "169.254.169.254", "2606:4700::1111"])
    resolver = GuardedResolver(HOOKS, inner)
    answers = await resolver.resolve("hooks.example.com", 443)
    assert [answer["host"] for answer in answers] == ["93.184.215.14", "2606:4700::1111"]
    await resolver.close()
    assert inner.closed


async def test_the_resolver_fails_naming_the_addresses_when_none_is_allowed() -> None:
    resolver = GuardedResolver(HOOKS, FakeResolver(["10.0.0.5", "127.0.0.1"]))
    with pytest.raises(OSError, match=r"10\.0\.0\.5, 127\.0\.0\.1"):
        await resolver.resolve("rebind.example.com", 443)


async def test_an_allowed_network_passes_the_resolver() -> None:
    rules = policy(hosts=("svc.internal",), cidrs=("10.0.0.0/8",))
    answers = await GuardedResolver(rules, FakeResolver(["10.0.0.5"])).resolve("svc.internal")
    assert [answer["host"] for answer in answers] == ["10.0.0.5"]


async def fetch_localhost(port: int, rules: EndpointPolicy) -> int:
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(rules))
    async with (aiohttp.ClientSession(connector=connector, trust_env=False) as session,
                session.get(f"http://localhost:{port}/") as response):
        return response.status


async def test_a_real_connection_to_loopback_by_name_needs_loopback_allowed(
    aiohttp_server: Any,
) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/", answer)
    server = await aiohttp_server(app, host="127.0.0.1")
    with pytest.raises(aiohttp.ClientConnectorError, match="refused addresses"):
        await fetch_localhost(server.port, policy(hosts=("localhost",)))
    allowing = policy(hosts=("localhost",), cidrs=("127.0.0.0/8",), allow_http=True)
    assert await fetch_localhost(server.port, allowing) == 204
