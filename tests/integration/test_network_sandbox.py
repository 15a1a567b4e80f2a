"""The three tiers proven from inside REAL sandboxes (lb_runner: user, mount, pid, net namespaces, Landlock, seccomp,
an unprivileged uid, the default python image), in the sealed network world of tests/lensbox_testlib/networld.py.

lensbox-net-sandbox does what lensboxd does: start the sandbox, attach its network (veth into the sandbox's netns,
the tier's rules), run a program, detach, stop. Programs inside meet the host's nftables rules, which refuse by address
and port and count every refusal; `off` has no route out at all.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import images  # noqa: E402
from lensbox_testlib import networld as nw  # noqa: E402

AGENT_SRC = open(nw.AGENT).read().split('if __name__ == "__main__":')[0]


@pytest.fixture(scope="module")
def world():
    rootfs = os.environ.get("LENSBOX_TEST_ROOTFS") or images.default_rootfs()
    w = nw.World()
    try:
        w.start_lensbox(tool="lensbox-net-sandbox")
        w.rootfs = rootfs
        w.sbs = {}
        for i, (name, tier) in enumerate((("rweb", "web"), ("rpkg", "packages"), ("roff", "off"))):
            words = w.ctl.ok(f"start {name} {tier} {rootfs} {w.tmp}/storage-{name} {w.tmp}/run {231000 + i}")
            w.sbs[name] = {"name": name, "ifname": words[0], "addr": words[1], "gateway": words[2]}
        yield w
    finally:
        if w.ctl:
            for name in ("rweb", "rpkg", "roff"):
                w.ctl.cmd(f"stop {name}")
        w.close()


def run_in(world, name, ops, extra="", timeout=120):
    """Runs the probe for each op inside sandbox name; returns the results (and the exec's exit status)."""
    ca = open(world.ca).read()
    code = (AGENT_SRC + f"\nopen('/tmp/ca.pem', 'w').write({ca!r})\n" + extra +
            f"\nfor a in json.loads({json.dumps(ops)!r}):\n    probe(a)\n")
    reply = world.ctl.cmd(f"exec {name} {timeout} {code.encode().hex()}")
    assert reply.startswith("ok "), reply
    _, code_s, sig, out, err = reply.split(" ")
    out = bytes.fromhex(out).decode() if out != "-" else ""
    err = bytes.fromhex(err).decode() if err != "-" else ""
    assert (code_s, sig) == ("0", "0"), err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def op(o, **kw):
    kw["op"] = o
    if kw.get("tls"):
        kw["ca"] = "/tmp/ca.pem"
    return kw


def check(results, expected):
    assert len(results) == len(expected), results
    for r, want in zip(results, expected):
        if want == "ok":
            assert r["ok"], r
        else:
            assert r["ok"] is False and r["error"] == want, (want, r)
            assert r["elapsed"] < 1.0, r


def test_world_is_sealed(world):
    world.assert_sealed()


def test_web_sandbox(world):
    before = world.blocked(world.sbs["rweb"])
    other = world.sbs["rpkg"]["addr"]
    ops = [
        (op("http", host=nw.SITE, port=80), "ok"),
        (op("http", host=nw.SITE, port=443, tls=True, sni=nw.SITE), "ok"),
        (op("http", host=nw.SITE_IP, port=8080), "ECONNREFUSED"),  # nftables: port not in web's set
        (op("udp", addr=nw.SITE_IP, port=9999), "EHOSTUNREACH"),  # nftables: no UDP
        (op("http", host=nw.LAN_IP, port=80), "ECONNREFUSED"),
        (op("http", host=nw.METADATA_IP, port=80), "ECONNREFUSED"),
        (op("http", host=nw.HOST_UPLINK_IP, port=80), "ECONNREFUSED"),
        (op("http", host=world.sbs["rweb"]["gateway"], port=80), "ECONNREFUSED"),
        (op("http", host=other, port=80), "ECONNREFUSED"),  # another sandbox
        (op("resolve", name=nw.REBIND), "EAI_NONAME"),
        (op("dns", server=nw.DNS_IP, name=nw.SITE), "EHOSTUNREACH"),
    ]
    results = run_in(world, "rweb", [o for o, _ in ops])
    check(results, [e for _, e in ops])
    assert '"site": "site"' in results[0]["body"] and '"sni": "site.example"' in results[1]["body"]
    # every nftables/resolver refusal counted
    assert world.blocked(world.sbs["rweb"]) >= before + 9


PIP = r"""
import subprocess
env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PIP_CERT": "/tmp/ca.pem"}
p = subprocess.run(["python3", "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check", "--no-deps",
                    "-d", "/tmp/dl", "--index-url", "https://pypi.org/simple/", "lbdemo"], env=env,
                   capture_output=True, text=True)
print(json.dumps({"op": "pip", "ok": p.returncode == 0, "files": os.listdir("/tmp/dl") if p.returncode == 0 else [],
                  "out": (p.stdout + p.stderr)[-1500:], "elapsed": 0}))
"""


def test_packages_sandbox(world):
    before = world.blocked(world.sbs["rpkg"])
    ops = [
        (op("http", host="pypi.org", port=443, tls=True, sni="pypi.org"), "ok"),
        (op("http", host=nw.REGISTRY_IP, port=443, tls=True, sni=nw.NEIGHBOUR), "ECONNRESET"),  # CDN neighbour
        (op("http", host=nw.REGISTRY_IP, port=80, host_header=nw.NEIGHBOUR), "ECONNRESET"),
        (op("http", host=nw.REGISTRY_IP, port=443, tls=True, sni=None), "ECONNRESET"),  # raw IP
        (op("resolve", name=nw.NEIGHBOUR), "EAI_NONAME"),  # DNS for other names
        (op("http", host=nw.REGISTRY_IP, port=8080), "ECONNREFUSED"),  # not relayed, not forwarded
        (op("http", host=nw.LAN_IP, port=80), "ECONNREFUSED"),
        (op("http", host=nw.METADATA_IP, port=80), "ECONNREFUSED"),
        (op("http", host=nw.HOST_UPLINK_IP, port=80), "ECONNREFUSED"),
        (op("dns", server=nw.DNS_IP, name="pypi.org"), "EHOSTUNREACH"),  # DNS to another server
    ]
    results = run_in(world, "rpkg", [o for o, _ in ops], extra=PIP)
    pip = results[0]
    assert pip["op"] == "pip" and pip["ok"] and pip["files"] == ["lbdemo-1.0-py3-none-any.whl"], pip["out"]
    check(results[1:], [e for _, e in ops])
    assert world.blocked(world.sbs["rpkg"]) >= before + 9


def test_off_sandbox(world):
    assert world.sbs["roff"]["addr"] == "-"
    ops = [
        (op("http", host=nw.HOST_UPLINK_IP, port=80), "ENETUNREACH"),  # off: only lo, no route out
        (op("udp", addr=nw.DNS_IP, port=53), "ENETUNREACH"),
        (op("udp", addr=world.sbs["rweb"]["gateway"], port=53), "ENETUNREACH"),
        # no resolver at all: glibc falls back to 127.0.0.1:53 inside the sandbox, where nothing listens
        (op("resolve", name=nw.SITE), "EAI_AGAIN"),
    ]
    check(run_in(world, "roff", [o for o, _ in ops]), [e for _, e in ops])


def test_stop_leaves_nothing(world):
    world.ctl.ok("stop rweb")
    t = world.nft("list", "table", "inet", "lensbox").stdout
    assert "sb0_" not in t and '"lbh0"' not in t, t
    links = json.loads(nw.sh("ip", "-j", "link", "show", ns=world.host).stdout)
    assert "lbh0" not in [l["ifname"] for l in links]
    # the packages sandbox is untouched
    assert "sb1_" in t
