"""Ready starts (supervisor/core/ready.c, runner/netns.c, runner/cgroup_ready.c): for `ready_starts` starts,
lensboxd makes ahead a network namespace (lo up, nothing else), which a start's init child is born in instead of
making its own, and on cgroup v1 the cgroup directories, which a start renames to its sandbox's instead of making.

Proven here: a started sandbox's namespace is one the core held ready, and the core no longer holds it (never handed
out twice); two sandboxes never share one; the pool tops up; what a program sees in it is what it saw in a namespace
of its own (only lo, any port bindable, nothing reachable outside; /proc/sys read-only). A started sandbox's cgroup
directories are ready ones renamed (same inode) with its own limits written; after a clean stop or a SIGKILL and
restart none of them is left. With the setting at 0 starts make their own."""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402

PROBE = """
import errno, os, socket
print(os.readlink('/proc/self/ns/net'))
print(sorted(n for _, n in socket.if_nameindex()))
s = socket.socket(); s.bind(('127.0.0.1', 80)); s.listen()
c = socket.create_connection(('127.0.0.1', 80), timeout=5); a, _ = s.accept(); c.sendall(b'hi')
print(a.recv(2).decode())
try:
    open('/proc/sys/net/ipv4/ip_unprivileged_port_start', 'w').write('1024')
    print('sysctl written')
except OSError as e:
    print('sysctl', errno.errorcode[e.errno])
try:
    socket.create_connection(('10.0.0.1', 80), timeout=2)
    print('reached out')
except OSError as e:
    print('out', errno.errorcode.get(e.errno, e.errno))
"""


V1 = os.path.isdir("/sys/fs/cgroup/memory/lensbox") or os.path.isfile("/sys/fs/cgroup/memory/memory.limit_in_bytes")


def ready(d):
    return d.request("GET", "/v1/health")[1]["ready_starts"]


def ready_sets(d):
    """The cgroup sets made ahead for this daemon (its uid range names them), by inode, in the memory hierarchy."""
    return {os.path.basename(p): os.stat(p).st_ino
            for p in glob.glob(f"/sys/fs/cgroup/memory/lensbox/r{d.uid_start}-*")}


def all_ready_dirs(d):
    return glob.glob(f"/sys/fs/cgroup/*/lensbox/r{d.uid_start}-*")


def held_namespaces(pid):
    """The network namespaces the core holds open by descriptor: its ready ones."""
    out = set()
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            link = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if link.startswith("net:["):
            out.add(link)
    return out


def probe(d, name):
    out = d.ok_run(name, PROBE)["stdout"].splitlines()
    assert out[1:] == ["['lo']", "hi", "sysctl EROFS", "out ENETUNREACH"], out
    return out[0]


def test_a_start_takes_a_ready_namespace_and_it_is_its_own():
    with Daemon(settings={"ready_starts": "2", "spare_sandboxes": "0"}) as d:
        want = {"target": 2, "network_namespaces": 2, "cgroups": 2 if V1 else None}
        assert wait_for(lambda: ready(d) == want, 30), ready(d)
        core = d.proc.pid
        held = held_namespaces(core)
        assert len(held) == 2, held

        first = probe(d, d.name("one"))
        assert first in held  # born in one the core held ready
        assert first not in held_namespaces(core)  # and the core let it go: never handed out twice
        # lensboxd's own namespace is not the sandbox's
        assert os.readlink(f"/proc/{core}/ns/net") != first

        second = probe(d, d.name("two"))
        assert second != first
        assert second in held

        # topped up again, with new namespaces
        assert wait_for(lambda: ready(d) == want, 30), ready(d)
        assert not (held_namespaces(core) & {first, second})

        # a stopped sandbox's restart takes one too, and keeps its files
        n = d.name("one")
        d.ok_run(n, "open('/sandbox/kept', 'w').write('kept')")
        s, body = d.request("POST", f"/v1/sandboxes/{n}/stop")
        assert s == 200, body
        before = held_namespaces(core)
        again = probe(d, n)
        assert again != first and again in before
        assert d.ok_run(n, "print(open('/sandbox/kept').read())")["stdout"] == "kept\n"
        d.stop()
        assert d.leaks() == []


def test_none_ready_starts_make_their_own():
    with Daemon(settings={"ready_starts": "0", "spare_sandboxes": "0"}) as d:
        assert ready(d) == {"target": 0, "network_namespaces": 0, "cgroups": 0 if V1 else None}
        assert held_namespaces(d.proc.pid) == set()
        assert all_ready_dirs(d) == []
        a = probe(d, d.name("a"))
        b = probe(d, d.name("b"))
        assert a != b


def cgroup_of(d, name, ctrl):
    return f"/sys/fs/cgroup/{ctrl}/lensbox/{d.runner_key(name)}"


def test_a_start_renames_a_ready_cgroup_set_and_writes_its_limits():
    if not V1:
        # cgroup v2 cannot rename a cgroup: nothing is made ahead there (the VM lane's v2 guest runs the rest)
        with Daemon(settings={"ready_starts": "2"}) as d:
            assert ready(d)["cgroups"] is None
        return
    with Daemon(settings={"ready_starts": "2", "spare_sandboxes": "0"}) as d:
        assert wait_for(lambda: len(ready_sets(d)) == 2, 30), ready_sets(d)
        sets = ready_sets(d)
        # made with their leaves, and no limit
        for r in sets:
            assert os.path.isdir(f"/sys/fs/cgroup/freezer/lensbox/{r}/init"), r
            assert os.path.isdir(f"/sys/fs/cgroup/memory/lensbox/{r}/run"), r
            with open(f"/sys/fs/cgroup/memory/lensbox/{r}/memory.limit_in_bytes") as f:
                assert int(f.read()) > 1 << 60

        n = d.name("limited")
        s, body = d.request("PUT", f"/v1/sandboxes/{n}", {"memory": "300Mi", "cpu": 0.5})
        assert s in (200, 201), body
        out = d.ok_run(n, "print(open('/proc/self/cgroup').read().count('/'))")
        assert out["stdout"].strip() != "", out
        mem = cgroup_of(d, n, "memory")
        assert os.stat(mem).st_ino in sets.values()  # a ready set, renamed
        taken = next(r for r, ino in sets.items() if ino == os.stat(mem).st_ino)
        assert glob.glob(f"/sys/fs/cgroup/*/lensbox/{taken}") == []  # in every hierarchy
        with open(f"{mem}/memory.limit_in_bytes") as f:
            assert int(f.read()) == 300 << 20
        with open(cgroup_of(d, n, "cpu") + "/cpu.cfs_quota_us") as f:
            assert int(f.read()) == 50000
        # the program's memory is charged to the sandbox's leaf, not left in the daemon's cgroup
        with open(f"{mem}/run/memory.max_usage_in_bytes") as f:
            assert int(f.read()) > 1 << 20
        # the sandbox's cgroup goes with it, as without a ready set
        s, body = d.request("DELETE", f"/v1/sandboxes/{n}")
        assert s in (200, 204), body
        assert not os.path.exists(mem)

        assert wait_for(lambda: len(ready_sets(d)) == 2, 30), ready_sets(d)
        d.stop()
        assert all_ready_dirs(d) == []  # a clean stop removes what nobody took
        assert d.leaks() == []


def test_sets_a_killed_lensboxd_left_are_swept_at_its_restart():
    if not V1:
        return
    d = Daemon(settings={"ready_starts": "2", "spare_sandboxes": "0"})
    try:
        assert wait_for(lambda: len(ready_sets(d)) == 2, 30), ready_sets(d)
        left = set(ready_sets(d).values())
        d.kill9()
        assert set(ready_sets(d).values()) == left  # empty cgroups: the kernel keeps them
        d.start()
        assert wait_for(lambda: len(ready_sets(d)) == 2, 30), ready_sets(d)
        assert not (set(ready_sets(d).values()) & left)  # swept, and new ones made
        d.ok_run(d.name("after"), "pass")
        d.stop()
        assert all_ready_dirs(d) == []
    finally:
        d.cleanup()
