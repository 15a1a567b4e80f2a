"""The `packages` relay's two ways of moving bytes, in a sealed network world (tests/lensbox_testlib/networld.py).

lensbox sets the host side of each `packages` sandbox's veth to take 256 KiB TCP segments (IPv4 BIG TCP, Linux >= 6.3) and the
relay then copies (recv/send) so that its segments to the sandbox are that large; with `--veth-gso-max 65536` (or on
an older kernel) the veth keeps 64 KiB and the relay splices. Both must carry a bulk download byte for byte, over
plain HTTP (length checked against Content-Length) and HTTPS (TLS authenticates every record, so any lost, repeated
or reordered byte fails the download).
"""
import os
import platform
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402

BULK = 48 << 20

# Reads IFLA_GSO_IPV4_MAX_SIZE (63, Linux 6.3) of one link over rtnetlink; prints it, or "absent".
GSO_READER = r"""
import socket, struct, sys
idx = socket.if_nametoindex(sys.argv[1])
body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, idx, 0, 0)
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.send(struct.pack("IHHII", 16 + len(body), 18, 1, 1, 0) + body)  # RTM_GETLINK, NLM_F_REQUEST
r = s.recv(65536)
off, found = 32, "absent"
while off + 4 <= len(r):
    ln, ty = struct.unpack("HH", r[off:off + 4])
    if ln < 4:
        break
    if ty == 63:
        found = str(struct.unpack("I", r[off + 4:off + 8])[0])
    off += (ln + 3) & ~3
print(found)
"""


def kernel_has_ipv4_big_tcp():
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 3)


@pytest.fixture(scope="module", params=["default", "65536"])
def world(request):
    with nw.World() as w:
        w.start_lensbox(() if request.param == "default" else ("--veth-gso-max", request.param))
        w.sb = w.add_sandbox("pkg", "packages")
        w.mode = request.param
        yield w


def test_world_is_sealed(world):
    world.assert_sealed()


def test_host_side_segment_size(world):
    r = nw.sh(nw.PY, "-c", GSO_READER, world.sb["ifname"], ns=world.host)
    if not kernel_has_ipv4_big_tcp():
        assert r.stdout.strip() == "absent", r.stdout
        return
    expect = 256 * 1024 if world.mode == "default" else 65536
    assert r.stdout.strip() == str(expect), r.stdout


def test_other_tiers_keep_the_classic_size(world):
    web = world.add_sandbox("web", "web")
    r = nw.sh(nw.PY, "-c", GSO_READER, web["ifname"], ns=world.host)
    assert r.stdout.strip() == ("65536" if kernel_has_ipv4_big_tcp() else "absent"), r.stdout
    world.ctl.ok("detach web")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_bulk_download_through_the_relay_is_intact(world, scheme):
    url = f"{scheme}://files.pythonhosted.org/bulk/{BULK}"
    r = nw.sh("env", "-i", "PATH=/usr/bin:/bin", "curl", "-sS", "--fail", "--noproxy", "*", "-o", "/dev/null",
              "-w", "%{size_download} %{http_code}", "--cacert", world.ca, url, ns=world.sb["ns"], check=False,
              timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(BULK), "200"], r.stdout


def test_a_refused_name_is_still_reset_in_either_mode(world):
    before = world.blocked(world.sb)
    r = world.probe(world.sb, op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni=nw.NEIGHBOUR, ca=world.ca)
    assert r["ok"] is False and r["error"] == "ECONNRESET", r
    assert r["elapsed"] < 1.0, r
    assert world.blocked(world.sb) > before
