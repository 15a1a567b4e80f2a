"""lensboxd wires netfilter/ into a sandbox's life: a `web` or `packages` sandbox gets a veth and the resolver
address, an `off` sandbox only lo; stopping removes the host side; a restart after SIGKILL removes what was left;
with networking off, networked tiers are refused with 503. No packet leaves the host: the tests only look at
interfaces, routes and files, and the whole test runs in a sealed network namespace (lensbox_testlib.sealed)
so lensbox's table and forwarding never touch the machine's own network."""
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import sealed  # noqa: E402
from lensbox_testlib.lensboxd import BUILD_DIR, Daemon  # noqa: E402

sealed.enter()

SHOW = "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; cat /etc/resolv.conf 2>&1 | grep nameserver || echo none"


def host_veths():
    # netlink, not /sys/class/net: sysfs shows the namespace it was mounted in, not ours
    return {name for _, name in socket.if_nameindex() if name.startswith("lbh")}


def test_tiers_get_their_interfaces_and_lose_them_on_stop():
    with Daemon(settings={"networking": "on"}) as d:
        health = d.request("GET", "/v1/health")[1]
        assert health["network"]["tiers_available"] is True, health["network"]
        before = host_veths()
        web = d.ok_run(d.name("web"), SHOW, "bash", sandbox={"network": "web"})
        ifaces, resolv = web["stdout"].splitlines()
        assert ifaces.split() == ["eth0", "lo"]
        assert resolv == "nameserver 169.254.53.53"
        added = host_veths() - before
        assert len(added) == 1, added
        off = d.ok_run(d.name("off"), SHOW, "bash")
        ifaces, resolv = off["stdout"].splitlines()
        assert ifaces.split() == ["lo"] and resolv == "none"
        assert d.request("GET", "/v1/health")[1]["network"]["attached"] >= 1
        assert d.request("POST", f"/v1/sandboxes/{d.name('web')}/stop")[1] == {"stopped": True}
        assert not (host_veths() & added)
        # changing the network recreates it with the new tier's plumbing
        r = d.ok_run(d.name("web"), SHOW, "bash", sandbox={"network": "off"})
        assert r["recreated"] == "the network changed from web to off"
        assert r["stdout"].splitlines()[0].split() == ["lo"]


def test_sigkill_leaves_nothing_after_restart():
    d = Daemon(settings={"networking": "on"})
    try:
        before = host_veths()
        d.ok_run(d.name("pk"), "true", "bash", sandbox={"network": "packages"})
        added = host_veths() - before
        assert len(added) == 1
        d.kill9()
        assert host_veths() & added, "the veth should still be there right after SIGKILL"
        d.start()
        assert not (host_veths() & added), "reconciliation left the veth"
        assert d.leaks() == []
        r = d.ok_run(d.name("pk"), SHOW, "bash")
        assert r["stdout"].splitlines()[0].split() == ["eth0", "lo"]
    finally:
        d.cleanup()


def test_networking_off_refuses_networked_tiers():
    with Daemon(settings={"networking": "off"}) as d:
        health = d.request("GET", "/v1/health")[1]
        assert health["network"]["tiers_available"] is False
        assert "networking = off" in health["network"]["why_not"]
        status, b = d.run(d.name("w"), "print(1)", sandbox={"network": "web"})
        assert status == 503 and b["error"]["code"] == "host_unavailable"
        assert "networking = off" in b["error"]["message"]
        assert d.ok_run(d.name("o"), "print(1)")["stdout"] == "1\n"


SERVICES_UID = 999999999  # lensboxd's default services_uid


def proc_status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def cli_health(d):
    """`lensbox health` against d, as an admin runs it: its stdout (exit 0: the host can run sandboxes)."""
    p = subprocess.run([os.path.join(BUILD_DIR, "clients", "cli", "lensbox"), "health"], capture_output=True,
                       env=dict(os.environ, LENSBOX_SOCKET=d.socket), timeout=60, text=True)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout


def test_resolver_and_relay_run_unprivileged_and_are_replaced():
    """By default the parsers of the sandboxes' DNS, TLS and HTTP bytes are not root: lensboxd forks a keeper as
    services_uid, which runs a supervisor, which runs them in a worker; a dead worker is replaced by its supervisor,
    a dead supervisor by the keeper; all three go with lensboxd."""
    d = Daemon(settings={"networking": "on"})
    try:
        # the worker confines itself with the kernel's best Landlock ABI that lensbox knows (7)
        landlock_abi = min(7, d.request("GET", "/v1/health")[1]["host"]["landlock_abi"])

        def services_are(alive, supervised, restarts, supervisor_restarts):
            return {"isolated": True, "alive": alive, "supervised": supervised, "landlock_abi": landlock_abi,
                    "restarts": restarts, "supervisor_restarts": supervisor_restarts, "crash_loop": False}

        assert d.request("GET", "/v1/health")[1]["network"]["services"] == services_are(True, True, 0, 0)
        keeper = [p for p in children(d.proc.pid) if proc_status(p)["Uid"].split()[0] == str(SERVICES_UID)]
        assert len(keeper) == 1, children(d.proc.pid)
        sup = children(keeper[0])
        assert len(sup) == 1, sup
        workers = children(sup[0])
        assert len(workers) == 1, workers
        for pid in (keeper[0], sup[0], workers[0]):
            st = proc_status(pid)
            assert st["Uid"].split() == [str(SERVICES_UID)] * 4 and st["Gid"].split() == [str(SERVICES_UID)] * 4, st
            assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0 and st["NoNewPrivs"] == "1", st
            with open(f"/proc/{pid}/cgroup") as f:  # lensboxd's own cgroup, not a sandbox's
                assert "lensbox/" not in f.read()
        os.kill(workers[0], 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            services = d.request("GET", "/v1/health")[1]["network"]["services"]
            if services["restarts"] == 1 and services["alive"]:
                break
            time.sleep(0.05)
        assert services == services_are(True, True, 1, 0), services
        assert children(sup[0]) not in ([], workers)
        deadline = time.monotonic() + 5  # the timer looks every 2 s
        while "was replaced" not in d.read_log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "the resolver and relay's worker process ended and was replaced" in d.read_log()
        health = cli_health(d)
        assert "network:     off, packages, web\n" in health, health
        assert "dns, relay:  running unprivileged (1 replaced so far)\n" in health, health
        assert "warning:" not in health, health
        # The supervisor killed: its worker follows it, and the keeper starts both again.
        os.kill(sup[0], 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            services = d.request("GET", "/v1/health")[1]["network"]["services"]
            if services["supervisor_restarts"] == 1 and services["alive"]:
                break
            time.sleep(0.05)
        assert services == services_are(True, True, 1, 1), services
        assert children(keeper[0]) not in ([], sup)
        deadline = time.monotonic() + 5
        while "supervisor process ended and was replaced" not in d.read_log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "the resolver and relay's supervisor process ended and was replaced" in d.read_log()
        assert "dns, relay:  running unprivileged (2 replaced so far)\n" in cli_health(d)
        # The keeper itself killed: nothing replaces it, and the admin is told so (log and `lensbox health`).
        pids = [keeper[0]] + children(keeper[0])
        pids += children(pids[-1])
        os.kill(keeper[0], 9)
        deadline = time.monotonic() + 10
        while d.request("GET", "/v1/health")[1]["network"]["services"]["supervised"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        services = d.request("GET", "/v1/health")[1]["network"]["services"]
        assert services == services_are(False, False, 1, 1), services
        health = cli_health(d)
        assert ("dns, relay:  stopped: packages and web sandboxes get no DNS or relay until lensboxd restarts\n"
                in health), health
        deadline = time.monotonic() + 5
        while "keeper process is gone" not in d.read_log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "the resolver and relay's keeper process is gone" in d.read_log()
        assert d.stop() == 0
        deadline = time.monotonic() + 5
        while any(os.path.exists(f"/proc/{p}") and proc_status(p)["State"][0] != "Z" for p in pids):
            assert time.monotonic() < deadline, [proc_status(p) for p in pids if os.path.exists(f"/proc/{p}")]
            time.sleep(0.05)
    finally:
        d.cleanup()
