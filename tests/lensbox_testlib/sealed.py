"""Moves the calling test process into a network namespace of its own that has no interface to the machine's real
network, before it starts any lensboxd with networking on.

    from lensbox_testlib import sealed
    sealed.enter()      # at import time of a test module: pytest and every daemon it starts live in there

The namespace holds lo and one veth pair whose both ends stay inside it; one end carries a default route (lensboxd's
netfilter wants a way out to masquerade through) to a gateway that does not exist, so whatever a sandbox sends dies
in this namespace and nothing can leave the machine (this kernel has no dummy driver), and lensbox's nftables table and forwarding switches change only this namespace, never the host's.
unshare(CLONE_NEWNET) affects the calling thread: call it from pytest's main thread before starting threads.
"""

import ctypes
import socket
import subprocess

CLONE_NEWNET = 0x40000000
DUMMY = "lbseal0"
PEER = "lbseal1"


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


def enter():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET) for a sealed test network: {socket.errno.errorcode.get(err, err)}")
    _ip("link", "set", "lo", "up")
    _ip("link", "add", DUMMY, "type", "veth", "peer", "name", PEER)
    _ip("link", "set", DUMMY, "up")
    _ip("link", "set", PEER, "up")
    _ip("addr", "add", "198.51.100.2/24", "dev", DUMMY)  # TEST-NET-2: documentation space, never routed
    _ip("route", "add", "default", "via", "198.51.100.1", "dev", DUMMY)
    assert_sealed()


def assert_sealed():
    """The seal, checked: only lo, the pair and lensbox's own veths exist here, and the pair's peer is here too."""
    names = {name for _, name in socket.if_nameindex()}
    foreign = {n for n in names if n not in ("lo", DUMMY, PEER) and not n.startswith("lbh")}
    assert not foreign, f"the sealed test network has interfaces to elsewhere: {sorted(foreign)}"
    assert {DUMMY, PEER} <= names, names
    link = subprocess.run(["ip", "-o", "link", "show", DUMMY], check=True, capture_output=True, text=True).stdout
    assert f"{DUMMY}@{PEER}:" in link, f"{DUMMY}'s peer is not in the sealed namespace: {link}"
