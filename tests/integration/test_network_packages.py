"""The `packages` tier, proven from inside a sandbox in a sealed network world (tests/lensbox_testlib/networld.py).

The world's registry (pypi.org and files.pythonhosted.org, HTTPS with a test CA) shares its address with a CDN
neighbour. A packages sandbox can `pip download` a wheel from the registry names and nothing else: not the neighbour
on the same IP, not a raw IP, not the LAN, the metadata address or the host, no DNS for other names, no DNS to
another server, no other port. Each refusal is asserted by its exact errno, is fast, and is counted.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox()
        w.sb = w.add_sandbox("pkg", "packages")
        yield w


def refused(world, expect, **args):
    before = world.blocked(world.sb)
    r = world.probe(world.sb, **args)
    assert r["ok"] is False, r
    assert r["error"] == expect, r
    assert r["elapsed"] < 1.0, r
    assert world.blocked(world.sb) > before, "the refusal was not counted in network_blocked"
    return r


def test_world_is_sealed(world):
    world.assert_sealed()


def test_pip_download_from_the_registry(world):
    dest = os.path.join(world.tmp, "dl")
    # a clean environment, as in a sandbox: the test CA is trusted through PIP_CERT
    r = nw.sh("env", "-i", "PATH=/usr/bin:/bin", f"HOME={world.tmp}", f"PIP_CERT={world.ca}", nw.PY, "-m", "pip",
              "download", "--no-cache-dir", "--disable-pip-version-check", "--no-deps", "-d", dest,
              "--index-url", "https://pypi.org/simple/", "lbdemo", ns=world.sb["ns"], check=False, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert os.listdir(dest) == ["lbdemo-1.0-py3-none-any.whl"]


def test_registry_names_resolve(world):
    for name in ("pypi.org", "files.pythonhosted.org"):
        r = world.probe(world.sb, op="resolve", name=name)
        assert r["ok"] and r["addrs"] == [nw.REGISTRY_IP], r


def test_registry_over_http_and_https(world):
    r = world.probe(world.sb, op="http", host="pypi.org", port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] and '"sni": "pypi.org"' in r["body"], r
    r = world.probe(world.sb, op="http", host="files.pythonhosted.org", port=80)
    assert r["ok"] and '"host": "files.pythonhosted.org"' in r["body"], r


def test_cdn_neighbour_on_the_same_ip_refused(world):
    # same address as the registry, other name: by SNI, by Host, and by the name's own resolution
    refused(world, "ECONNRESET", op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni=nw.NEIGHBOUR, ca=world.ca)
    refused(world, "ECONNRESET", op="http", host=nw.REGISTRY_IP, port=80, host_header=nw.NEIGHBOUR)
    refused(world, "EAI_NONAME", op="resolve", name=nw.NEIGHBOUR)


def test_raw_ip_refused(world):
    refused(world, "ECONNRESET", op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni=None, ca=world.ca)
    refused(world, "ECONNRESET", op="http", host=nw.REGISTRY_IP, port=80)


def test_listed_name_to_another_host_gets_the_real_registry(world):
    # asking for pypi.org at the web site's address: the relay connects to the address it resolved itself
    r = world.probe(world.sb, op="http", host=nw.SITE_IP, port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] and '"site": "registry"' in r["body"], r


def test_port_8080_refused(world):
    refused(world, "ECONNREFUSED", op="http", host=nw.REGISTRY_IP, port=8080)


def test_lan_metadata_and_host_refused(world):
    refused(world, "ECONNREFUSED", op="http", host=nw.LAN_IP, port=80)
    refused(world, "ECONNREFUSED", op="http", host=nw.LAN_IP, port=443)
    refused(world, "ECONNREFUSED", op="http", host=nw.METADATA_IP, port=80)
    refused(world, "ECONNREFUSED", op="http", host=nw.HOST_UPLINK_IP, port=80)
    refused(world, "ECONNREFUSED", op="http", host=world.sb["gateway"], port=80)


def test_dns_for_other_names_is_nxdomain(world):
    before = world.blocked(world.sb)
    r = world.probe(world.sb, op="dns", server=world.sb["gateway"], name=nw.SITE)
    assert r["ok"] and r["rcode"] == 3 and r["addrs"] == [], r  # NXDOMAIN, not the world's answer
    assert world.blocked(world.sb) > before


def test_dns_to_another_server_refused(world):
    refused(world, "EHOSTUNREACH", op="dns", server=nw.DNS_IP, name="pypi.org")


def test_udp_refused(world):
    refused(world, "EHOSTUNREACH", op="udp", addr=nw.SITE_IP, port=9999)


def test_relay_port_not_reachable_directly(world):
    # the relay accepts only what the DNAT rule sent it; a direct connection to its port is refused
    refused(world, "ECONNREFUSED", op="http", host=world.sb["gateway"], port=nw.RELAY_PORT)
    refused(world, "EHOSTUNREACH", op="udp", addr=world.sb["gateway"], port=nw.RESOLVER_PORT)


def test_dns_over_tcp_refused(world):
    refused(world, "ECONNREFUSED", op="http", host=nw.RESOLVER_ADDR, port=53)
    refused(world, "ECONNREFUSED", op="http", host=world.sb["gateway"], port=53)


def test_malformed_dns_gets_silence_and_the_resolver_survives(world):
    r = world.probe(world.sb, op="udp", addr=nw.RESOLVER_ADDR, port=53, payload="x" * 40, timeout=1)
    assert r["ok"] is False and r["error"] == "TIMEOUT", r
    r = world.probe(world.sb, op="resolve", name="pypi.org")
    assert r["ok"] and r["addrs"] == [nw.REGISTRY_IP], r


def test_http_pipelining_cannot_name_a_second_host(world):
    first = "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n"
    second = f"GET / HTTP/1.1\r\nHost: {nw.NEIGHBOUR}\r\n\r\n"
    # both requests in one segment: the relay refuses the whole connection
    refused(world, "ECONNRESET", op="http_raw", host="pypi.org", port=80, parts=[first + second])
    # the second request sent after the first: only the checked one is ever answered
    r = world.probe(world.sb, op="http_raw", host="pypi.org", port=80, parts=[first, second], pause=0.3)
    assert r["ok"] and r["responses"] == 1, r
    assert '"host": "pypi.org"' in r["body"] and nw.NEIGHBOUR not in r["body"], r


def test_ipv6_goes_to_the_relay_too(world):
    # the sandbox has IPv6 (docs/network.md, "IPv6"): TCP 443 to any public IPv6 address reaches the relay, which
    # resets a name that is not on the list (test_network_web_ipv6.py has the rest)
    assert world.sb["addr6"] != "-", world.sb
    refused(world, "ECONNRESET", op="http", host="2606:4700::1111", port=443, tls=True, sni=nw.SITE, ca=world.ca)


def test_one_sandbox_cannot_take_every_relay_connection(world):
    # 64 relayed connections per sandbox: the 65th and later are reset at once, the first 64 stay open
    before = world.blocked(world.sb)
    r = world.probe(world.sb, op="flood_tcp", addr=nw.REGISTRY_IP, port=443, n=70, wait=0.5)
    assert r["ok"] and r["alive"] == 64 and r["dead"] == 6, r
    assert world.blocked(world.sb) >= before + 6
