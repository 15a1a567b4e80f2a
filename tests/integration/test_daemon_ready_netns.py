"""Ready network namespaces (supervisor/core/ready.c, runner/netns.c): lensboxd keeps `ready_network_namespaces`
network namespaces made ahead (lo up, nothing else), and a start's init child is born in one instead of making its
own. Proven here: a started sandbox's namespace is one the core held ready, the core no longer holds it (never
handed out twice), two sandboxes never share one, the pool tops up, what a program sees in it is what it saw in a
namespace of its own (only lo, any port bindable, nothing reachable outside), /proc/sys stays read-only to a program, and
with the setting at 0 starts make their own."""
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


def ready(d):
    return d.request("GET", "/v1/health")[1]["ready_network_namespaces"]


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
    with Daemon(settings={"ready_network_namespaces": "2", "spare_sandboxes": "0"}) as d:
        assert wait_for(lambda: ready(d) == {"ready": 2, "target": 2}, 30), ready(d)
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
        assert wait_for(lambda: ready(d)["ready"] == 2, 30), ready(d)
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
    with Daemon(settings={"ready_network_namespaces": "0", "spare_sandboxes": "0"}) as d:
        assert ready(d) == {"ready": 0, "target": 0}
        assert held_namespaces(d.proc.pid) == set()
        a = probe(d, d.name("a"))
        b = probe(d, d.name("b"))
        assert a != b
