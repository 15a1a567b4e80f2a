"""lensboxd's bookkeeping of the network tiers, in the sealed network world (tests/lensbox_testlib/networld.py):
each run's result and ledger row count the attempts its tier refused during that run (`network_blocked`), and the
daemon's timer puts lensbox's nftables table back when someone flushes the ruleset.

lensboxd runs in the world's host namespace (nsenter --net), never the machine's; `nft flush ruleset` runs there too.
Every refused target is inside the world (its LAN host and metadata server), so no packet leaves it.
"""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import networld as nw  # noqa: E402

AGENT_SRC = open(nw.AGENT).read().split('if __name__ == "__main__":')[0]


@pytest.fixture(scope="module")
def env():
    yield from nw.world_daemon()


def program(ops):
    return AGENT_SRC + f"\nfor a in json.loads({json.dumps(ops)!r}):\n    probe(a)\n"


def errors(run):
    assert run["exit_code"] == 0, run
    return [json.loads(line).get("error") for line in run["stdout"].splitlines() if line.startswith("{")]


def ledger_row(d, run_id):
    status, row = d.request("GET", f"/v1/runs/{run_id}")
    assert status == 200, row
    return row


LAN = {"op": "http", "host": nw.LAN_IP, "port": 80}
METADATA = {"op": "http", "host": nw.METADATA_IP, "port": 80}
SITE = {"op": "http", "host": nw.SITE_IP, "port": 80}


def test_network_blocked_counts_the_runs_own_refusals(env):
    w, d = env
    name = d.name("count")
    # Each refused TCP connect is one SYN answered by a reset from lensbox's rules: one attempt each.
    run = d.ok_run(name, program([LAN, METADATA, LAN]), sandbox={"network": "web"})
    assert errors(run) == ["ECONNREFUSED"] * 3, run
    assert run["network_blocked"] == 3, run
    assert run["refused"]["network"] == 3, run  # the same count, in the result's `refused`
    assert ledger_row(d, run["id"])["network_blocked"] == 3
    # The next run in the same sandbox counts only its own: the public site is allowed, so nothing is refused.
    clean = d.ok_run(name, program([SITE]))
    assert errors(clean) == [None], clean
    assert clean["network_blocked"] == 0, clean
    one = d.ok_run(name, program([METADATA]))
    assert one["network_blocked"] == 1, one
    rows = d.request("GET", f"/v1/runs?sandbox={name}&limit=10")[1]["runs"]
    assert [r["network_blocked"] for r in rows] == [1, 0, 3], rows
    # and the Python client carries it
    assert d.client().runs(name, limit=1)[0].network_blocked == 1


def test_a_forbidden_connect_explains_the_failure(env):
    """A program that fails after its tier refused a connection: the message says so, for the model."""
    w, d = env
    src = program([LAN]) + "\nraise SystemExit(1)\n"
    run = d.ok_run(d.name("why"), src, sandbox={"network": "web"})
    assert run["exit_code"] == 1 and run["refused"]["network"] == 1, run
    assert run["message"] == ("exited with code 1; the sandbox refused 1 network connection its network tier (web) "
                              "forbids"), run
    assert d.client().run(d.name("why"), "python", src).refused.network == 1


def test_network_blocked_counts_relay_and_resolver_refusals(env):
    """`packages`: a TLS name off the list is reset by the relay, a name off the list gets NXDOMAIN from the
    resolver; each counts once."""
    w, d = env
    ca = open(w.ca).read()
    ops = [{"op": "http", "host": nw.REGISTRY_IP, "port": 443, "tls": True, "sni": nw.NEIGHBOUR, "ca": "/tmp/ca.pem"},
           {"op": "resolve", "name": nw.SITE}]
    src = f"open('/tmp/ca.pem', 'w').write({ca!r})\n" + program(ops)
    run = d.ok_run(d.name("pkg"), src, sandbox={"network": "packages"})
    assert errors(run) == ["ECONNRESET", "EAI_NONAME"], run
    assert run["network_blocked"] == 2, run
    assert ledger_row(d, run["id"])["network_blocked"] == 2


def test_network_blocked_is_zero_for_off(env):
    w, d = env
    run = d.ok_run(d.name("off"), program([SITE]))
    assert errors(run) != [None], run  # nothing reachable ...
    assert run["network_blocked"] == 0, run  # ... and nothing to count: no interface to send on


def lensbox_table(w):
    return w.nft("list", "table", "inet", "lensbox")


def test_flushed_ruleset_is_restored_by_the_timer(env):
    w, d = env
    name = d.name("flush")
    d.ok_run(name, "print(1)", sandbox={"network": "web"})  # a sandbox attached, so its rules must come back too
    assert lensbox_table(w).returncode == 0
    log_before = len(d.read_log())
    r = nw.sh("nft", "flush", "ruleset", ns=w.host)  # inside the world's host namespace only
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    # lensboxd's verification runs every 2 s (or every timer_interval_ms when longer): back within a few seconds
    while time.monotonic() - t0 < 8 and lensbox_table(w).returncode != 0:
        time.sleep(0.1)
    restored_after = time.monotonic() - t0
    table = lensbox_table(w)
    assert table.returncode == 0, f"the table was not restored within 8 s: {table.stderr}"
    assert restored_after < 5, restored_after
    # The warning is written once the repair is complete, which may be a moment after the table reappears.
    deadline = time.monotonic() + 3
    while "nftables table restored" not in (log := d.read_log()[log_before:]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "nftables table restored" in log, log[-2000:]
    # The rules, not only an empty table, are back: the sandbox is refused the LAN again, and it is counted.
    deadline = time.monotonic() + 5
    while True:
        run = d.ok_run(name, program([LAN, SITE]))
        if errors(run) == ["ECONNREFUSED", None] or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the repair may still be bringing the sandbox's veth back up
    assert errors(run) == ["ECONNREFUSED", None], run
    assert run["network_blocked"] == 1, run
