"""Helpers for the flowtable (fast path) tests, in the sealed world of networld.py: no packet leaves it.

What the kernel can do is found out apart from lensbox: a throwaway network namespace tries to create a flowtable.
A test then asserts that lensbox says the same in its health, and reads the facts from the world's host namespace:
the flowtable's devices (`nft -j list flowtables`), conntrack's entries (`/proc/net/nf_conntrack`, where the kernel
marks an offloaded connection `[OFFLOAD]`), and counters of a watch table on the forward hook, which the fast path
skips.

Packets are made by hand (raw sockets inside a sandbox's namespace, as a hostile root in a sandbox could) and watched
for at the world's "internet" end (an AF_PACKET socket on its eth0), each carrying a marker in its payload so a
packet is recognised whatever address translation it went through.
"""
import json
import re
import subprocess
import time

from . import networld as nw

PROBE_TABLE = """table inet lbftprobe {
\tflowtable f {
\t\thook ingress priority filter
\t\tdevices = { "lo" }
\t}
}
"""


BULK = 32 << 20  # bytes of a bulk download: at least 512 packets of 64 KiB into the sandbox


def new_world(extra_args=()):
    """A sealed world (networld.World) with lensbox started in it, knowing whether its kernel has flowtables
    (w.flowtables, and nft's error as w.kernel_says)."""
    w = nw.World()
    try:
        w.flowtables, w.kernel_says = kernel_has_flowtables(w)
        w.start_lensbox(extra_args)
        return w
    except BaseException:
        w.close()
        raise


def offloaded(world, trickle):
    """conntrack's entry of trickle's connection (exactly one) and whether the kernel marks it offloaded."""
    lines = [l for l in conntrack(world, trickle.addr) if f" sport={trickle.sport} " in l]
    assert len(lines) == 1, conntrack(world, trickle.addr)
    return lines[0], "[OFFLOAD]" in lines[0]


def wait_offload_state(world, trickle, want, seconds=3.0):
    """Polls until the connection's [OFFLOAD] mark is want (the kernel adds a flow on its next accepted packet)."""
    deadline = time.monotonic() + seconds
    while True:
        line, state = offloaded(world, trickle)
        if state == want or time.monotonic() > deadline:
            return line, state
        time.sleep(0.05)


def curl_bulk(sb, size=BULK):
    """Downloads size bytes from the world's site inside sandbox sb; the byte count curl received."""
    r = nw.sh("curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w", "%{size_download}",
              f"http://{nw.SITE_IP}/bulk/{size}", ns=sb["ns"], timeout=120)
    return int(r.stdout)


def kernel_has_flowtables(world):
    """(True, "") when this kernel accepts a flowtable, else (False, nft's error). Tried in a namespace of its own."""
    ns = f"{world.tag}-ftprobe"
    nw.sh("ip", "netns", "add", ns)
    try:
        nw.sh("ip", "link", "set", "lo", "up", ns=ns)
        r = nw.sh("nft", "-f", "-", ns=ns, input=PROBE_TABLE, check=False)
        return r.returncode == 0, r.stderr.strip()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def health(ctl):
    """lensbox-net's `health` line as a dict (quoted values may hold spaces)."""
    line = ctl.cmd("health")
    assert line.startswith("ok "), line
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


def flowtable_devices(world):
    """The devices of lensbox's flowtable, sorted; None when the table has no flowtable."""
    r = world.nft("-j", "list", "flowtables")
    assert r.returncode == 0, r.stderr
    for item in json.loads(r.stdout)["nftables"]:
        ft = item.get("flowtable")
        if ft and ft["table"] == "lensbox" and ft["family"] == "inet":
            assert ft["name"] == "fastpath", ft
            dev = ft.get("dev", [])
            return sorted([dev] if isinstance(dev, str) else dev)
    return None


def conntrack(world, addr):
    """conntrack's entries (lines of /proc/net/nf_conntrack) whose original source is addr, in the world's host."""
    r = nw.sh("cat", "/proc/net/nf_conntrack", ns=world.host)
    return [l for l in r.stdout.splitlines() if f" src={addr} " in l]


def reply_tuple(line):
    """(src, dst, sport, dport) of a conntrack line's reply direction (the second src=... group)."""
    srcs = re.findall(r"src=(\S+) dst=(\S+) sport=(\d+) dport=(\d+)", line)
    assert len(srcs) == 2, line
    s, d, sp, dp = srcs[1]
    return s, d, int(sp), int(dp)


WATCH = "lbftwatch"


def watch_forward(world, rules):
    """A table of the test's own on the forward hook, after lensbox's chain, counting what rules match (one counter
    each). Returns a function reading the counts in order."""
    body = "".join(f"add rule inet {WATCH} passed {r} counter\n" for r in rules)
    nw.sh("nft", "-f", "-", ns=world.host, input=f"add table inet {WATCH}\ndelete table inet {WATCH}\n"
          f"add table inet {WATCH}\n"
          f"add chain inet {WATCH} passed {{ type filter hook forward priority 10; policy accept; }}\n" + body)

    def counts():
        out = json.loads(nw.sh("nft", "-j", "list", "chain", "inet", WATCH, "passed", ns=world.host).stdout)
        found = []
        for item in out["nftables"]:
            rule = item.get("rule")
            if rule:
                found += [e["counter"]["packets"] for e in rule["expr"] if "counter" in e]
        assert len(found) == len(rules), out
        return found
    return counts


def unwatch(world):
    nw.sh("nft", "delete", "table", "inet", WATCH, ns=world.host, check=False)


TRICKLE = r"""
import json, socket, sys, time, select
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(("GET /bulk/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % sys.argv[3]).encode())
got = len(s.recv(65536))
print(json.dumps({"sport": s.getsockname()[1], "addr": s.getsockname()[0]}), flush=True)
# read a little, often, until told to stop: the connection stays busy (and established) the whole time; a
# connection that stalls (its veth removed) is waited on, not left, so the test decides when it ends
s.settimeout(0.2)
while not select.select([sys.stdin], [], [], 0.02)[0]:
    try:
        chunk = s.recv(16384)
    except socket.timeout:
        continue
    except OSError:
        break
    if not chunk:
        break
    got += len(chunk)
print(json.dumps({"got": got}), flush=True)
"""


class Trickle:
    """A download from inside a sandbox, read slowly and held open until close(): a live, busy connection."""

    def __init__(self, sb, addr, port=80, size=1 << 30):
        self.p = subprocess.Popen(["ip", "netns", "exec", sb["ns"], nw.PY, "-c", TRICKLE, addr, str(port), str(size)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError(f"the download did not start: {self.p.stderr.read()[:2000]}")
        first = json.loads(line)
        self.sport, self.addr = first["sport"], first["addr"]

    def close(self):
        """Stops reading; returns the bytes received."""
        if self.p.poll() is None:
            self.p.stdin.close()
        out = self.p.stdout.read()
        self.p.wait(timeout=10)
        return json.loads(out.strip().splitlines()[-1])["got"] if out.strip() else 0


SEND = r"""
import json, socket, struct, sys
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF
sent = 0
for p in json.loads(sys.argv[1]):
    src, dst = socket.inet_aton(p["src"]), socket.inet_aton(p["dst"])
    data = p["marker"].encode()
    tcp = struct.pack("!HHIIBBHHH", p["sport"], p["dport"], 1000, 1000, 5 << 4, 0x18, 64240, 0, 0) + data
    tcp = tcp[:16] + struct.pack("!H", csum(src + dst + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), p.get("id", 0x1111), 0, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.sendto(ip + tcp, (p["dst"], 0))
    sent += 1
print(sent)
"""


def inject(sb, packets):
    """Sends hand-made TCP segments (PSH|ACK, a marker as payload) from inside sandbox sb. packets: dicts with src,
    dst, sport, dport, marker and optionally id (the IP header's identification)."""
    r = nw.sh(nw.PY, "-c", SEND, json.dumps(packets), ns=sb["ns"], timeout=30)
    assert r.stdout.strip() == str(len(packets)), r.stderr


SNIFF = r"""
import json, select, socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind(("eth0", 0))
print("ready", flush=True)
seen = {}
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r:
        break
    frame = s.recv(65536)
    i = frame.find(b"lbflow-")
    if i < 0 or len(frame) < 14 + 20:
        continue
    ip = frame[14:]
    ihl = (ip[0] & 15) * 4
    marker = frame[i:i + 40].split(b"\0")[0].decode("ascii", "replace")
    sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
    seen[marker] = {"src": socket.inet_ntoa(ip[12:16]), "dst": socket.inet_ntoa(ip[16:20]), "sport": sport,
                    "dport": dport}
print(json.dumps(seen), flush=True)
"""


class Sniffer:
    """Watches the world's internet end (inet's eth0) for packets carrying a marker "lbflow-...". stop() returns
    {marker: {src, dst, sport, dport}} of what arrived."""

    def __init__(self, world):
        self.p = subprocess.Popen(["ip", "netns", "exec", world.inet, nw.PY, "-c", SNIFF], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise AssertionError(f"the sniffer did not start: {line} {self.p.stderr.read()[:2000]}")

    def stop(self):
        self.p.stdin.close()
        out = self.p.stdout.read()
        self.p.wait(timeout=10)
        return json.loads(out.strip().splitlines()[-1])

