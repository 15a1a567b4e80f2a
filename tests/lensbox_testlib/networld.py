"""The sealed network test world: namespaces standing for the host, the internet and a LAN, with no way out.

Safety rule: no packet of these tests ever leaves the namespaces this module creates. The "host" namespace is a fresh
netns (never the machine's), has only its own veths to the "internet" and "lan" namespaces, and `World.assert_sealed`
proves it before anything else runs. lensbox's table is loaded inside that namespace by running lensbox-net there.

    sandbox netns ──veth lbh<N>──┐
                                  host netns ── up0 11.1.0.1/24 ──── inet: 11.1.0.2; on lo: 11.2.0.10 registry+CDN
                                  (lensbox-net,  lan0 10.1.0.1/24 ─┐       neighbour, 11.2.0.20 site, 11.2.0.53 DNS
                                   host web server :80)            └─ lan: 10.1.0.10 LAN host, 169.254.169.254 metadata

IPv6, beside the IPv4 above (which is unchanged): 2a0b:11::/32 stands for the internet as 11.0.0.0/8 does (global
looking: inside 2000::/3 and outside every line of policy/network/denied.list), fd00:1::/64 is the LAN's unique local
range. The host's default IPv6 route goes to inet too.

    host  up0 2a0b:11:1::1/64 ── inet eth0 2a0b:11:1::2/64; on lo: 2a0b:11:2::10 registry, ::20 site.example (dual
          lan0 fd00:1::1/64 ─┐        stack), ::60 site6.example (IPv6 only), ::53 DNS; and DENIED6_BAIT: addresses
                              │        of the denied ranges, each answering HTTP on 80, so a refusal proves the rule
                              └ lan eth0 fd00:1::10/64 (rebind6.example's answer)

Every world interface has accept_ra=0 and autoconf=0 (set as the namespace's default before any interface exists) and
static addresses only (nodad); `World.assert_sealed` checks that, and that no IPv6 default route, router-advertised
route or address of this world exists anywhere but where this module put it. The host namespace's IPv6 forwarding
is lensbox's business, not the world's: on kernels with /proc/sys/net/ipv6/conf/<if>/force_forwarding (6.17 and
later) the product turns it on per interface (its lbh<N> and the uplink); the world leaves all.forwarding at 0.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "networld_agent.py")
PY = "/usr/bin/python3"

REGISTRY_IP = "11.2.0.10"  # pypi.org, files.pythonhosted.org and the CDN neighbour share it
SITE_IP = "11.2.0.20"
DNS_IP = "11.2.0.53"
HOST_UPLINK_IP = "11.1.0.1"
INET_GW_IP = "11.1.0.2"
HOST_UPLINK2_IP = "11.3.0.1"  # add_second_uplink(): up1, the host's second way to the "internet"
INET_GW2_IP = "11.3.0.2"
HOST_LAN_IP = "10.1.0.1"
LAN_IP = "10.1.0.10"
METADATA_IP = "169.254.169.254"
NEIGHBOUR = "neighbour.example"
SITE = "site.example"
REBIND = "rebind.example"  # a public-looking name whose answer is in 10.0.0.0/8
SLOW = "slow.example"  # answered 1 s late: holds a resolver query in flight that long
NAMES = {SLOW: SITE_IP, "pypi.org": REGISTRY_IP, "files.pythonhosted.org": REGISTRY_IP, NEIGHBOUR: REGISTRY_IP, SITE: SITE_IP,
         REBIND: LAN_IP, "metadata.example": METADATA_IP}
# ---- IPv6 (see the module's docstring)
HOST_UPLINK6_IP = "2a0b:11:1::1"
INET_GW6_IP = "2a0b:11:1::2"
HOST_UPLINK2_6_IP = "2a0b:11:3::1"  # add_second_uplink()'s up1
INET_GW2_6_IP = "2a0b:11:3::2"
REGISTRY6_IP = "2a0b:11:2::10"
SITE_DUAL6_IP = "2a0b:11:2::20"  # site.example's AAAA (its A is SITE_IP)
SITE6_IP = "2a0b:11:2::60"  # site6.example: AAAA only
DNS6_IP = "2a0b:11:2::53"  # the same DNS server, over IPv6
HOST_LAN6_IP = "fd00:1::1"
LAN6_IP = "fd00:1::10"
NAT64_METADATA_IP = "64:ff9b::a9fe:a9fe"  # 169.254.169.254 through the well-known NAT64 prefix
SITE6 = "site6.example"
REBIND6 = "rebind6.example"  # a public-looking name whose AAAA is the LAN host
METADATA64 = "metadata64.example"  # one whose AAAA embeds the metadata address (NAT64)
REGISTRY6 = "pypi6.example"  # the registry stand-in reachable only over IPv6 (AAAA only; list it with --package)
NAMES6 = {SITE: SITE_DUAL6_IP, SITE6: SITE6_IP, "pypi.org": REGISTRY6_IP, "files.pythonhosted.org": REGISTRY6_IP,
          REGISTRY6: REGISTRY6_IP,
          NEIGHBOUR: REGISTRY6_IP, REBIND6: LAN6_IP, METADATA64: NAT64_METADATA_IP}
# Addresses of denied IPv6 ranges held by inet's lo, each with an HTTP server on port 80: were lensbox to let a
# sandbox's packet to one through, the host's default route would bring it there and it would be answered.
DENIED6_BAIT = {
    "100::1": "::/3 (discard-only 100::/64)",
    "::a9fe:a9fe": "::/3 (IPv4-compatible ::/96, 169.254.169.254)",
    "64:ff9b:1::a9fe:a9fe": "::/3 (local-use NAT64 64:ff9b:1::/48, 169.254.169.254)",
    "4000::1": "4000::/2",
    "8000::1": "8000::/1",
    "2001:2::1": "2001::/23 (benchmarking 2001:2::/48)",
    "2001:0:a9fe:a9fe::": "2001::/23 (Teredo 2001::/32, 169.254.169.254)",
    "2001:db8::1": "2001:db8::/32",
    "2002:a9fe:a9fe::1": "2002::/16 (6to4 of 169.254.169.254)",
    "3fff::1": "3fff::/20",
    NAT64_METADATA_IP: "64:ff9b::/96 with a denied IPv4 address (169.254.169.254)",
    "64:ff9b::a01:a": "64:ff9b::/96 with a denied IPv4 address (10.1.0.10)",
}
POOL6_DEFAULT = "fd6c:6273::/64"  # lensbox's default network_pool6 (--pool6)
RESOLVER_PORT = 10053
RESOLVER_ADDR = "169.254.53.53"  # LB_NET_RESOLVER_ADDR
RELAY_PORT = 10080


def sh(*args, check=True, ns=None, **kw):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


# Run in the world's host namespace with argv ADDR TCP_PORT UDP_PORT (ADDR IPv4 or IPv6): as root and as uid 65534
# (any other local user), a TCP connect (2 s timeout) and a UDP datagram "from-the-host" to a sandbox. Prints
# {"0": {"tcp": errno-name or "ok", "fast": connect answered within 1 s, "udp": ...}, "65534": {...}}.
HOST_TO_SANDBOX = r"""
import errno, json, os, socket, sys, time
addr, tcp_port, udp_port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), {}
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
for uid in (0, 65534):  # root, and any other local user
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if uid:
            os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
        res = {}
        s = socket.socket(fam); s.settimeout(2); t = time.monotonic()
        try:
            s.connect((addr, tcp_port)); res["tcp"] = "ok"
        except OSError as e:
            res["tcp"] = errno.errorcode.get(e.errno, str(e))
        res["fast"] = time.monotonic() - t < 1
        u = socket.socket(fam, socket.SOCK_DGRAM)
        try:
            u.sendto(b"from-the-host", (addr, udp_port)); res["udp"] = "ok"
        except OSError as e:
            res["udp"] = errno.errorcode.get(e.errno, str(e))
        os.write(w, json.dumps(res).encode()); os._exit(0)
    os.close(w); os.waitpid(pid, 0)
    out[str(uid)] = json.loads(os.read(r, 4096))
print(json.dumps(out))
"""


def has_pool6(tool="lensbox-net"):
    """Whether this build's lensbox-net gives `web` sandboxes IPv6 (its serve has --pool6): "" if so, else why not."""
    exe = os.path.join(os.environ["LENSBOX_BUILD_DIR"], "netfilter", tool)
    if not os.access(exe, os.X_OK):
        raise AssertionError(f"{exe} is missing: build the {tool} target first")
    r = subprocess.run([exe, "serve", "--help"], capture_output=True, text=True, timeout=10)
    if "--pool6" in r.stdout + r.stderr:
        return ""
    return f"{tool} serve has no --pool6 (IPv6 for web sandboxes, issue 20, is not in this build)"


def world_sysctl(ns, key, value):
    sh("sysctl", "-q", "-w", f"{key}={value}", ns=ns)


class NetCtl:
    """lensbox-net serve, running in the world's host namespace; one command a line."""

    def __init__(self, world, extra_args=(), tool="lensbox-net"):
        exe = os.path.join(os.environ["LENSBOX_BUILD_DIR"], "netfilter", tool)
        if not os.access(exe, os.X_OK):
            raise AssertionError(f"{exe} is missing: build the lensbox-net target first")
        policy = os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "policy")
        self.p = subprocess.Popen(
            # nsenter --net only: unlike `ip netns exec` it keeps the machine's /sys (and so its cgroup mounts),
            # which lensbox-net-sandbox needs to start real sandboxes
            ["nsenter", f"--net=/run/netns/{world.host}", exe, "serve", "--policy", policy, "--dns", f"{DNS_IP}:53",
             "--resolver-port", str(RESOLVER_PORT), "--relay-port", str(RELAY_PORT), *extra_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise AssertionError(f"lensbox-net did not start: {line} {self.p.stderr.read()}")

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def ok(self, line):
        r = self.cmd(line)
        assert r.startswith("ok"), f"{line!r} -> {r!r}"
        return r.split()[1:]

    def close(self):
        if self.p.poll() is None:
            try:
                self.cmd("quit")
                self.p.wait(timeout=10)
            except Exception:
                self.p.kill()
                self.p.wait()


class World:
    def __init__(self, suffix=""):
        """suffix: told apart from another World of the same process (namespaces are named after the pid)."""
        self.tag = f"lbt{os.getpid() % 100000}{suffix}"
        self.host, self.inet, self.lan = f"{self.tag}-host", f"{self.tag}-inet", f"{self.tag}-lan"
        self.sandboxes = []
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="lensbox-networld-")
        self.ctl = None
        self.host_ifaces, self.inet_ifaces = {"lo", "up0", "lan0"}, {"lo", "eth0"}
        self.ipv6_defaults = set()  # the IPv6 default routes this world has on purpose: (netns, gateway, device)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- construction

    def _build(self):
        for ns in (self.host, self.inet, self.lan):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            # name lookups inside the world go to the world's DNS server, never to the machine's resolver
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/resolv.conf", "w") as f:
                f.write(f"nameserver {DNS_IP}\noptions timeout:1 attempts:1\n")
        for ns in (self.host, self.inet, self.lan):
            # no interface of this world ever takes a router advertisement or makes itself an address: "default"
            # is what each veth created below starts with
            for scope in ("all", "default", "lo"):
                world_sysctl(ns, f"net.ipv6.conf.{scope}.accept_ra", 0)
                world_sysctl(ns, f"net.ipv6.conf.{scope}.autoconf", 0)
        self.assert_sealed()  # before a single address exists: nothing but lo
        # The veths are created inside the host namespace with their peers moved straight into ours: at no time
        # does an interface of this world exist in the machine's own namespace.
        sh("ip", "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", self.inet, ns=self.host)
        sh("ip", "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", self.lan, ns=self.host)
        sh("ip", "addr", "add", f"{HOST_UPLINK_IP}/24", "dev", "up0", ns=self.host)
        sh("ip", "addr", "add", f"{HOST_LAN_IP}/24", "dev", "lan0", ns=self.host)
        for dev in ("up0", "lan0"):
            sh("ip", "link", "set", dev, "up", ns=self.host)
        sh("ip", "route", "add", "default", "via", INET_GW_IP, ns=self.host)
        sh("ip", "route", "add", f"{METADATA_IP}/32", "via", LAN_IP, ns=self.host)
        sh("ip", "addr", "add", f"{INET_GW_IP}/24", "dev", "eth0", ns=self.inet)
        sh("ip", "link", "set", "eth0", "up", ns=self.inet)
        for ip in (REGISTRY_IP, SITE_IP, DNS_IP):
            sh("ip", "addr", "add", f"{ip}/32", "dev", "lo", ns=self.inet)
        sh("ip", "addr", "add", f"{LAN_IP}/24", "dev", "eth0", ns=self.lan)
        sh("ip", "link", "set", "eth0", "up", ns=self.lan)
        sh("ip", "addr", "add", f"{METADATA_IP}/32", "dev", "lo", ns=self.lan)
        sh("ip", "route", "add", "default", "via", HOST_LAN_IP, ns=self.lan)
        self._build_ipv6()
        self.assert_sealed()
        self._certs()
        self._servers()

    def _build_ipv6(self):
        # nodad: the addresses are usable at once (servers bind them next), and both ends of each link are ours
        sh("ip", "addr", "add", f"{HOST_UPLINK6_IP}/64", "dev", "up0", "nodad", ns=self.host)
        sh("ip", "addr", "add", f"{HOST_LAN6_IP}/64", "dev", "lan0", "nodad", ns=self.host)
        sh("ip", "-6", "route", "add", "default", "via", INET_GW6_IP, "dev", "up0", ns=self.host)
        sh("ip", "addr", "add", f"{INET_GW6_IP}/64", "dev", "eth0", "nodad", ns=self.inet)
        for ip in [REGISTRY6_IP, SITE_DUAL6_IP, SITE6_IP, DNS6_IP] + list(DENIED6_BAIT):
            sh("ip", "addr", "add", f"{ip}/128", "dev", "lo", ns=self.inet)
        sh("ip", "addr", "add", f"{LAN6_IP}/64", "dev", "eth0", "nodad", ns=self.lan)
        sh("ip", "-6", "route", "add", "default", "via", HOST_LAN6_IP, "dev", "eth0", ns=self.lan)
        self.ipv6_defaults = {(self.host, INET_GW6_IP, "up0"), (self.lan, HOST_LAN6_IP, "eth0")}

    def world_addresses(self):
        """Every address this module gives the world's namespaces (IPv4 and IPv6), as ipaddress objects."""
        import ipaddress
        addrs = {HOST_UPLINK_IP, INET_GW_IP, HOST_LAN_IP, LAN_IP, METADATA_IP, REGISTRY_IP, SITE_IP, DNS_IP,
                 HOST_UPLINK6_IP, INET_GW6_IP, HOST_LAN6_IP, LAN6_IP, REGISTRY6_IP, SITE_DUAL6_IP, SITE6_IP, DNS6_IP}
        addrs |= set(DENIED6_BAIT)
        if "up1" in self.host_ifaces:
            addrs |= {HOST_UPLINK2_IP, INET_GW2_IP, HOST_UPLINK2_6_IP, INET_GW2_6_IP}
        return {ipaddress.ip_address(a) for a in addrs}

    def _assert_sealed_ipv6(self):
        """IPv6: no interface takes router advertisements or makes addresses; the only IPv6 addresses are static
        ones; the only default routes are the world's own; nothing of the world is in the machine's namespace."""
        import ipaddress
        defaults = set()
        for ns in (self.host, self.inet, self.lan):
            for link in json.loads(sh("ip", "-j", "link", "show", ns=ns).stdout):
                name = link["ifname"]
                for key in ("accept_ra", "autoconf"):
                    path = f"/proc/sys/net/ipv6/conf/{name}/{key}"
                    value = sh("cat", path, ns=ns, check=False).stdout.strip()
                    assert value == "0", f"{ns}: {path} is {value!r}"
            for iface in json.loads(sh("ip", "-j", "-6", "addr", "show", ns=ns).stdout or "[]"):
                for a in iface.get("addr_info", []):
                    # autoconf (SLAAC) and DHCPv6-less RA addresses carry "dynamic" (a finite valid lifetime)
                    assert not a.get("dynamic") and a.get("valid_life_time", 4294967295) == 4294967295, \
                        f"{ns}: {iface['ifname']} has a dynamic IPv6 address {a}"
                    ip = ipaddress.ip_address(a["local"])
                    if a.get("scope") == "global" and not iface["ifname"].startswith("lbh"):
                        assert ip in self.world_addresses(), f"{ns}: unexpected address {ip}"
                    elif a.get("scope") == "global":  # lensbox's pool: a unique local range of its own
                        assert ip in ipaddress.ip_network("fc00::/7"), f"{ns}: {iface['ifname']} has {ip}"
            for r in json.loads(sh("ip", "-j", "-6", "route", "show", "table", "all", ns=ns).stdout or "[]"):
                assert r.get("protocol") != "ra", f"{ns}: a route from a router advertisement {r}"
                if r.get("dst") == "default":
                    defaults.add((ns, r.get("gateway"), r.get("dev")))
        assert defaults == self.ipv6_defaults, f"IPv6 default routes {defaults}, expected {self.ipv6_defaults}"
        # the machine's own namespace holds none of this world's addresses
        machine = subprocess.run(["ip", "-j", "addr", "show"], check=True, capture_output=True, text=True).stdout
        own = {ipaddress.ip_address(a["local"]) for i in json.loads(machine) for a in i.get("addr_info", [])}
        assert not own & self.world_addresses(), f"the machine's namespace holds {own & self.world_addresses()}"

    def assert_sealed(self):
        """The host namespace is not the machine's, and holds nothing that leads out of this world."""
        own = os.stat("/proc/self/ns/net").st_ino
        for ns in (self.host, self.inet, self.lan):
            ino = os.stat(f"/run/netns/{ns}").st_ino
            assert ino != own, f"{ns} is the machine's own network namespace"
        links = json.loads(sh("ip", "-j", "link", "show", ns=self.host).stdout)
        for link in links:
            name = link["ifname"]
            assert name in self.host_ifaces or name.startswith("lbh"), f"unexpected interface {name}"
            if name != "lo":
                assert link.get("link_netnsid") is not None, f"{name} is not a veth into another namespace"
        # every route of the host namespace goes through one of this world's veths
        for fam in ("-4", "-6"):
            routes = json.loads(sh("ip", "-j", fam, "route", "show", "table", "all", ns=self.host).stdout or "[]")
            for r in routes:
                dev = r.get("dev", "lo")
                assert dev in self.host_ifaces or dev.startswith("lbh"), f"route {r} leaves the world"
        for ns, allowed in ((self.inet, self.inet_ifaces), (self.lan, {"lo", "eth0"})):
            for link in json.loads(sh("ip", "-j", "link", "show", ns=ns).stdout):
                assert link["ifname"] in allowed, f"unexpected interface {link['ifname']} in {ns}"
        self._assert_sealed_ipv6()

    def add_second_uplink(self):
        """A second veth from the host to the "internet" (up1 11.3.0.1/24 2a0b:11:3::1/64 -- eth1 11.3.0.2/24
        2a0b:11:3::2/64), with no route through it yet: move_default_route() puts the default routes there, as when a
        host's link changes."""
        self.host_ifaces.add("up1")
        self.inet_ifaces.add("eth1")
        sh("ip", "link", "add", "up1", "type", "veth", "peer", "name", "eth1", "netns", self.inet, ns=self.host)
        sh("ip", "addr", "add", f"{HOST_UPLINK2_IP}/24", "dev", "up1", ns=self.host)
        sh("ip", "link", "set", "up1", "up", ns=self.host)
        sh("ip", "addr", "add", f"{INET_GW2_IP}/24", "dev", "eth1", ns=self.inet)
        sh("ip", "link", "set", "eth1", "up", ns=self.inet)
        sh("ip", "addr", "add", f"{HOST_UPLINK2_6_IP}/64", "dev", "up1", "nodad", ns=self.host)
        sh("ip", "addr", "add", f"{INET_GW2_6_IP}/64", "dev", "eth1", "nodad", ns=self.inet)
        self.assert_sealed()

    def move_default_route(self, via, dev):
        """The IPv4 default route to via on dev, and the IPv6 one to the same link's other end."""
        sh("ip", "route", "replace", "default", "via", via, "dev", dev, ns=self.host)
        via6 = {"up0": INET_GW6_IP, "up1": INET_GW2_6_IP}[dev]
        sh("ip", "-6", "route", "replace", "default", "via", via6, "dev", dev, ns=self.host)
        self.ipv6_defaults = {d for d in self.ipv6_defaults if d[0] != self.host} | {(self.host, via6, dev)}
        self.assert_sealed()

    def _certs(self):
        d = self.tmp
        self.ca = f"{d}/ca.pem"
        sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", f"{d}/ca.key", "-out", self.ca, "-days", "2", "-subj", "/CN=lensbox test CA")
        self.certs = {}
        for name in ("pypi.org", "files.pythonhosted.org", NEIGHBOUR, SITE, SITE6, REGISTRY6):
            key, csr, crt, ext = (f"{d}/{name}.{x}" for x in ("key", "csr", "pem", "ext"))
            with open(ext, "w") as f:
                f.write(f"subjectAltName=DNS:{name}\n")
            sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
               "-out", csr, "-subj", f"/CN={name}")
            sh("openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", f"{d}/ca.key", "-CAcreateserial",
               "-out", crt, "-days", "2", "-extfile", ext)
            self.certs[name] = [crt, key]

    def _wheel(self):
        """A minimal, valid wheel and the simple-index pages that list it."""
        import base64
        import hashlib
        import zipfile
        whl = f"{self.tmp}/lbdemo-1.0-py3-none-any.whl"
        files = {"lbdemo/__init__.py": b"VALUE = 42\n",
                 "lbdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: lbdemo\nVersion: 1.0\n",
                 "lbdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: lensbox-test\nRoot-Is-Purelib: true\n"
                                                b"Tag: py3-none-any\n"}
        record = ""
        for p, data in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record += f"{p},sha256={digest},{len(data)}\n"
        record += "lbdemo-1.0.dist-info/RECORD,,\n"
        with zipfile.ZipFile(whl, "w") as z:
            for p, data in files.items():
                z.writestr(p, data)
            z.writestr("lbdemo-1.0.dist-info/RECORD", record)
        sha = hashlib.sha256(open(whl, "rb").read()).hexdigest()
        index = f"{self.tmp}/index.html"
        with open(index, "w") as f:
            f.write('<!DOCTYPE html><html><body><a href="https://files.pythonhosted.org/packages/lbdemo-1.0-py3-'
                    f'none-any.whl#sha256={sha}">lbdemo-1.0-py3-none-any.whl</a></body></html>\n')
        return {"/simple/lbdemo/": index, "/packages/lbdemo-1.0-py3-none-any.whl": whl}

    def spawn(self, ns, role, args):
        p = subprocess.Popen(["ip", "netns", "exec", ns, PY, AGENT, role, json.dumps(args)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = p.stdout.readline().strip()
        if line != "ready":
            raise AssertionError(f"{role} in {ns} did not start: {line} {p.stderr.read()[:2000]}")
        return p

    def _servers(self):
        self.spawn(self.inet, "dns", {"listen": [DNS_IP, 53], "listen6": [DNS6_IP, 53], "names": NAMES,
                                      "names6": NAMES6, "slow": {SLOW: 1.0}})
        reg_certs = {n: self.certs[n] for n in ("pypi.org", "files.pythonhosted.org", NEIGHBOUR, REGISTRY6)}
        self.spawn(self.inet, "http", {"site": "registry", "listen": [[REGISTRY_IP, 443, True], [REGISTRY_IP, 80,
                                                                                                 False],
                                                                      [REGISTRY_IP, 8080, False],
                                                                      [REGISTRY6_IP, 443, True],
                                                                      [REGISTRY6_IP, 80, False]],
                                       "certs": reg_certs, "default_cert": "pypi.org", "files": self._wheel(),
                                       "bulk": f"{self.tmp}/bulk"})
        self.spawn(self.inet, "http", {"site": "site", "listen": [[SITE_IP, 443, True], [SITE_IP, 80, False],
                                                                  [SITE_IP, 8080, False], [SITE_DUAL6_IP, 443, True],
                                                                  [SITE_DUAL6_IP, 80, False],
                                                                  [SITE_DUAL6_IP, 8080, False]],
                                       "certs": {SITE: self.certs[SITE]}, "default_cert": SITE, "bulk": f"{self.tmp}/bulk"})
        self.udp_log = f"{self.tmp}/udp.log"
        self.spawn(self.inet, "udp_echo", {"listen": [SITE_IP, 9999], "log": self.udp_log})
        self.spawn(self.inet, "http", {"site": "site6", "listen": [[SITE6_IP, 443, True], [SITE6_IP, 80, False],
                                                                   [SITE6_IP, 8080, False]],
                                       "certs": {SITE6: self.certs[SITE6]}, "default_cert": SITE6})
        self.udp6_log = f"{self.tmp}/udp6.log"
        self.spawn(self.inet, "udp_echo", {"listen": [SITE6_IP, 9999], "log": self.udp6_log})
        self.spawn(self.inet, "http", {"site": "denied-bait", "listen": [[ip, 80, False] for ip in DENIED6_BAIT]})
        self.spawn(self.lan, "http", {"site": "lan", "listen": [[LAN_IP, 80, False], [LAN_IP, 443, False],
                                                                [LAN6_IP, 80, False], [LAN6_IP, 443, False]]})
        self.spawn(self.lan, "http", {"site": "metadata", "listen": [[METADATA_IP, 80, False]]})
        self.spawn(self.host, "http", {"site": "host", "listen": [["0.0.0.0", 80, False], ["0.0.0.0", 8000, False],
                                                                  ["::", 80, False], ["::", 8000, False]]})

    # ---- sandboxes and lensbox

    def start_lensbox(self, extra_args=(), tool="lensbox-net"):
        """lensbox-net (plain network namespaces stand for sandboxes) or lensbox-net-sandbox (real sandboxes)."""
        self.ctl = NetCtl(self, extra_args, tool)
        return self.ctl

    def add_sandbox(self, name, tier):
        """A plain network namespace standing for a sandbox, attached through lensbox-net. Returns its addresses
        (addr6 and gateway6 "-" when it has no IPv6: its tier, or a lensbox-net without IPv6)."""
        ns = f"{self.tag}-{name}"
        sh("ip", "netns", "add", ns)
        self.sandboxes.append(ns)
        os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
        words = self.ctl.ok(f"attach {name} /run/netns/{ns} {tier}")
        gw = words[2]
        with open(f"/etc/netns/{ns}/resolv.conf", "w") as f:
            f.write(f"nameserver {RESOLVER_ADDR if gw != '-' else '127.0.0.1'}\noptions timeout:2 attempts:1\n")
        v6 = words[3:5] if len(words) >= 5 else ["-", "-"]
        return {"ns": ns, "ifname": words[0], "addr": words[1], "gateway": gw, "name": name, "addr6": v6[0],
                "gateway6": v6[1]}

    def probe(self, sb, **args):
        r = sh(PY, AGENT, "probe", json.dumps(args), ns=sb["ns"], timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    def blocked(self, sb):
        return int(self.ctl.ok(f"blocked {sb['name']}")[0])

    def host_links(self):
        """The host side of every sandbox's veth (lbh<N>) in the host namespace, sorted."""
        links = json.loads(sh("ip", "-j", "link", "show", ns=self.host).stdout)
        return sorted(link["ifname"] for link in links if link["ifname"].startswith("lbh"))

    def nft(self, *args):
        return sh("nft", *args, ns=self.host, check=False)

    def close(self):
        if self.ctl:
            try:
                self.ctl.cmd("unload")
            except Exception:
                pass
            self.ctl.close()
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in self.sandboxes + [self.host, self.inet, self.lan]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def world_daemon(settings=None):
    """A real lensboxd in a new sealed world's host namespace (nsenter --net, so it keeps the machine's /sys and
    cgroups), networking on, the world's DNS server as its upstream; yields (world, daemon) and cleans both up.
    For module fixtures: `env = pytest.fixture(scope="module")(lambda: networld.world_daemon())`."""
    from .lensboxd import Daemon

    class InWorld(Daemon):
        def __init__(self, world, **kw):
            self.world = world
            super().__init__(**kw)

        def argv(self):
            return ["nsenter", f"--net=/run/netns/{self.world.host}"] + super().argv()

    w = World()
    d = None
    try:
        w.assert_sealed()
        d = InWorld(w, settings=dict({"networking": "on", "dns_upstream": f"{DNS_IP}:53"}, **(settings or {})))
        yield w, d
    finally:
        if d:
            d.cleanup()
        w.close()
