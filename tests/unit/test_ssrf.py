"""The destination policy: which addresses an HTTP target may reach, whatever the URL's spelling."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.targets.ssrf import DestinationPolicy, legacy_ipv4


class FakeResolver:
    """Answers from a table and counts lookups; unknown names fail like a real NXDOMAIN."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        name = host.rstrip(".")  # a trailing dot only marks the name fully qualified
        if name not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[name]


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"literal address {host} must not be looked up")


REFUSED_LITERALS = [
    # IPv4 loopback in every spelling a resolver accepts
    "http://127.0.0.1/",
    "http://127.255.255.254:8080/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://127.0.0.1./",
    "HTTP://127.0.0.1/",
    # this network / unspecified
    "http://0.0.0.0/",
    "http://0/",
    "http://0.1.2.3/",
    # private, CGNAT, link-local, metadata
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://169.254.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://0xa9fea9fe/",
    "http://2852039166/",
    # multicast, reserved, broadcast, documentation
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",
    # IPv6
    "http://[::1]/",
    "http://[::]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fd00:ec2::254]/",
    "http://[ff02::1]/",
    "http://[fec0::1]/",
    "http://[2001:db8::1]/",
    # IPv6 forms that deliver to an internal IPv4 address
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]:8080/",
    "http://[::127.0.0.1]/",
    "http://[::a9fe:a9fe]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b:1::a00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
]


@pytest.mark.parametrize("url", REFUSED_LITERALS)
def test_internal_literal_addresses_are_refused_without_any_lookup(url):
    with pytest.raises(PermanentError) as caught:
        DestinationPolicy(resolver=no_dns).check(url)
    assert caught.value.error_class == "Refused"
    assert "refused" in caught.value.message


PUBLIC_LITERALS = {
    "http://8.8.8.8/": ["8.8.8.8"],
    "https://1.1.1.1:8443/x": ["1.1.1.1"],
    "http://134744072/": ["8.8.8.8"],  # decimal spelling of a public address
    "http://[2606:4700:4700::1111]/": ["2606:4700:4700::1111"],
    "http://[64:ff9b::8.8.8.8]/": ["64:ff9b::808:808"],  # NAT64 of a public address
    "http://[2002:808:808::1]/": ["2002:808:808::1"],  # 6to4 of a public address
}


@pytest.mark.parametrize(("url", "expected"), PUBLIC_LITERALS.items())
def test_public_literal_addresses_pass_as_themselves(url, expected):
    assert DestinationPolicy(resolver=no_dns).check(url) == expected


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.258", "10.1.1.2"),
        ("0", "0.0.0.0"),
        ("0xA9.0xFE.0xA9.0xFE", "169.254.169.254"),
    ],
)
def test_legacy_ipv4_spellings_parse_as_inet_aton_does(spelling, address):
    assert str(legacy_ipv4(spelling)) == address
    # The system resolver agrees, so the verdict matches where a socket would connect.
    assert socket.inet_ntoa(socket.inet_aton(spelling)) == address


@pytest.mark.parametrize("name", ["example.com", "1.2.3.4.5", "256.1.1.1", "08.0.0.1", "0x", "127.0.0.1a"])
def test_non_addresses_are_names(name):
    assert legacy_ipv4(name) is None


NAMES = {
    "localhost": ["127.0.0.1", "::1"],
    "metadata.example": ["169.254.169.254"],
    "intranet.example": ["10.20.30.40"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "cgnat.example": ["100.64.1.1"],
    "split.example": ["93.184.216.34", "10.0.0.7"],  # one public, one private
    "split6.example": ["2606:4700::6810:84e5", "fd00::1"],
    "public.example": ["93.184.216.34", "2606:4700::6810:84e5"],
}


@pytest.mark.parametrize(
    "name",
    [
        "localhost",
        "metadata.example",
        "intranet.example",
        "mapped.example",
        "cgnat.example",
        "split.example",
        "split6.example",
    ],
)
def test_names_resolving_to_any_internal_address_are_refused(name):
    resolver = FakeResolver(NAMES)
    with pytest.raises(PermanentError) as caught:
        DestinationPolicy(resolver=resolver).check(f"https://{name}/hook")
    assert caught.value.error_class == "Refused"
    assert name in caught.value.message
    assert resolver.calls == [name]


def test_refusal_names_the_host_address_and_reason():
    policy = DestinationPolicy(resolver=FakeResolver(NAMES))
    with pytest.raises(PermanentError, match=r"'metadata.example'.*169\.254\.169\.254.*metadata"):
        policy.check("http://metadata.example/")
    with pytest.raises(PermanentError, match=r"IPv4-mapped 127\.0\.0\.1, loopback"):
        policy.check("http://mapped.example/")


def test_names_resolving_only_to_public_addresses_pass_with_every_address():
    resolver = FakeResolver(NAMES)
    assert DestinationPolicy(resolver=resolver).check("https://public.example/") == [
        "93.184.216.34",
        "2606:4700::6810:84e5",
    ]


def test_allow_list_by_cidr_admits_only_addresses_inside_it():
    policy = DestinationPolicy(["10.0.0.0/8", "127.0.0.1/32"], resolver=FakeResolver(NAMES))
    assert policy.check("http://intranet.example/") == ["10.20.30.40"]
    assert policy.check("http://127.0.0.1:9000/") == ["127.0.0.1"]
    [mapped] = policy.check("http://[::ffff:127.0.0.1]/")
    assert ipaddress.ip_address(mapped) == ipaddress.ip_address("::ffff:127.0.0.1")  # str() varies by version
    assert policy.check("http://split.example/") == ["93.184.216.34", "10.0.0.7"]
    with pytest.raises(PermanentError, match="loopback"):
        policy.check("http://127.0.0.2/")
    with pytest.raises(PermanentError, match="::1"):
        policy.check("http://localhost/")  # ::1 is not inside 127.0.0.1/32
    with pytest.raises(PermanentError, match="metadata"):
        policy.check("http://169.254.169.254/")


def test_allow_list_by_name_admits_whatever_that_name_resolves_to():
    policy = DestinationPolicy(["LocalHost.", "intranet.example"], resolver=FakeResolver(NAMES))
    assert policy.check("http://localhost:8080/") == ["127.0.0.1", "::1"]
    assert policy.check("http://INTRANET.example./") == ["10.20.30.40"]
    with pytest.raises(PermanentError):
        policy.check("http://metadata.example/")
    with pytest.raises(PermanentError):
        policy.check("http://127.0.0.1/")  # the name is allowed, not its address


def test_bad_allow_list_entries_are_rejected_up_front():
    with pytest.raises(ValueError):
        DestinationPolicy(["10.0.0.0/33"])


def test_dns_failure_is_retryable():
    with pytest.raises(RetryableError) as caught:
        DestinationPolicy(resolver=FakeResolver({})).check("http://nowhere.example/")
    assert caught.value.error_class == "DNS"
    with pytest.raises(RetryableError):
        DestinationPolicy(resolver=FakeResolver({"empty.example": []})).check("http://empty.example/")


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "http://example.com:99999/", "http:///nohost", "file:///etc/passwd"]
)
def test_malformed_urls_are_permanent(url):
    with pytest.raises(PermanentError) as caught:
        DestinationPolicy(resolver=FakeResolver({})).check(url)
    assert caught.value.error_class == "BadUrl"


def test_credentials_in_url_are_refused():
    with pytest.raises(PermanentError) as caught:
        DestinationPolicy(resolver=no_dns).check("http://user:pw@8.8.8.8/")
    assert caught.value.error_class == "Refused"


def test_destination_keeps_the_name_for_host_header_and_tls():
    policy = DestinationPolicy(resolver=FakeResolver({"api.example": ["93.184.216.34"]}))
    dest = policy.destination("https://API.example.:8443/hooks/run?x=1#frag")
    assert dest.host == "api.example"
    assert dest.addresses == ("93.184.216.34",)
    assert dest.host_header == "api.example:8443"
    assert dest.target == "/hooks/run?x=1"
    assert policy.destination("http://[2606:4700::1]/").host_header == "[2606:4700::1]"
