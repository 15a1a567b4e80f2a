"""`lensbox policy check|explain|diff`, the reviewers' commands, run as a reviewer would: no lensboxd.

check: the real policy/ is clean; a copy with one broken line in each kind of file names that file and line (found by
the test in the copy) and exits 1. explain: every syscall seccomp.json allows, and the difference from Docker's
default, asserted against the files themselves (policy/tools/seccomp-resolve flattens both profiles independently of
the C code). diff: lensbox's table loaded by lensbox-net (lensboxd's own code) in network namespaces this test
creates, with nothing linking them to the machine's network: untouched -> no drift; a rule added by hand to a base
chain or to a sandbox's chain -> drift, exit 1.
"""
import json
import os
import re
import shutil
import subprocess
import uuid

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SRC, "build"))
LENSBOX = os.path.join(BUILD, "clients", "cli", "lensbox")
LENSBOX_NET = os.path.join(BUILD, "netfilter", "lensbox-net")
POLICY = os.path.join(SRC, "policy")
DOCKER = os.path.join(SRC, "clients", "cli", "data", "docker-default-seccomp.json")
RESOLVE = os.path.join(SRC, "policy", "tools", "seccomp-resolve")


def lb(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [LENSBOX, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def copy(tmp_path):
    d = tmp_path / "policy"
    shutil.copytree(POLICY, d)
    return d


def break_line(d, rel, old, new):
    """Replaces the first `old` in d/rel; returns the 1-based line of its first character."""
    path = d / rel
    text = path.read_text()
    at = text.index(old)
    path.write_text(text[:at] + new + text[at + len(old):])
    return text[:at].count("\n") + 1


def test_check_real_policy_is_clean():
    assert os.access(LENSBOX, os.X_OK), f"{LENSBOX} is not built"
    rc, out, err = lb("policy", "check", POLICY)
    assert rc == 0, out + err
    assert out.splitlines()[-1] == f"ok: every file of {POLICY} parses as lensboxd would load it"
    rc, out, err = lb("--json", "policy", "check", POLICY)
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True and doc["errors"] == []


BROKEN = [
    ("seccomp.json", '"keyctl"', '"keyctll"', 0, 'unknown syscall "keyctll"'),
    ("landlock.rules", "\nwrite /tmp\n", "\nwirte /tmp\n", 1, 'unknown directive "wirte"'),
    ("limits.conf", "\nmemory = ", "\nmemory = much ", 1, "memory"),
    ("network/denied.list", "\n169.254.0.0/16", "\n169.254.0.1/16", 1, "address range"),
    ("network/packages.list", "\nfiles.pythonhosted.org", "\nfiles..pythonhosted.org", 1, "host name"),
    ("network/base.nft", "{{RELAY_PORT}} }", "{{RELAYPORT}} }", 0, "{{RELAYPORT}} is not a word"),
    ("network/packages.nft", "jump {{SB}}_refuse\n\t}\n}", "jump {{SB}}_refuze\n\t}\n}", 0,
     "No such file or directory"),
    ("network/web.nft", "ip daddr @denied4 jump", "ip daddr @denied5 jump", 0, "did you mean set"),
    ("network/services.nft", "meta skuid {{SERVICES_UID}}", "meta skuid {{SERVICES_UID}} {{SERVICES_UID}}", 0,
     "syntax error"),
]


@pytest.mark.parametrize("rel,old,new,skip,why", BROKEN, ids=[b[0] for b in BROKEN])
def test_check_names_the_broken_file_and_line(copy, rel, old, new, skip, why):
    line = break_line(copy, rel, old, new) + skip
    rc, out, err = lb("policy", "check", str(copy))
    assert rc == 1, out + err
    errors = [l for l in out.splitlines() if not l.startswith("note: ") and not l.startswith("1 error")]
    assert len(errors) == 1, out
    assert errors[0].startswith(f"{rel}:{line}: "), out
    assert why in errors[0], out
    assert out.splitlines()[-1] == f"1 error in {copy}"
    doc = json.loads(lb("--json", "policy", "check", str(copy))[1])
    assert doc["ok"] is False
    assert [(e["file"], e["line"]) for e in doc["errors"]] == [(rel, line)]


def test_check_reports_every_file(copy):
    a = break_line(copy, "landlock.rules", "read-exec /", "read-exec-all /")
    b = break_line(copy, "network/denied.list", "\n10.0.0.0/8", "\nten/8") + 1
    rc, out, _ = lb("policy", "check", str(copy))
    assert rc == 1
    assert f"landlock.rules:{a}: " in out and f"network/denied.list:{b}: " in out, out
    assert out.splitlines()[-1] == f"2 errors in {copy}"


def resolved(profile):
    """policy/tools/seccomp-resolve's lines for amd64 and no capability; Docker's absent valueTwo is 0, so an
    explicit /0x0 says nothing more."""
    out = subprocess.run([RESOLVE, profile], capture_output=True, text=True, check=True).stdout
    return {re.sub(r"/0x0\b", "", l) for l in out.splitlines() if not l.startswith("(default)")}


def allowed(lines):
    rules = {}
    for l in lines:
        name, action = l.split()[:2]
        if action == "ALLOW":
            rules.setdefault(name, set()).add(l)
    return rules


def test_explain_lists_every_allowed_syscall_and_the_docker_difference():
    rc, out, err = lb("--json", "policy", "explain", POLICY)
    assert rc == 0, err
    doc = json.loads(out)["seccomp"]
    with open(os.path.join(POLICY, "seccomp.json")) as f:
        ours = json.load(f)
    allowed_in_file = {n for r in ours["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    listed = {r["name"] for r in doc["rules"] if r["action"] == "ALLOW"}
    assert listed == allowed_in_file
    # every rule of the file, with its arguments, is in the listing
    for r in ours["syscalls"]:
        for a in r.get("args") or []:
            needle = f"a{a['index']} {a['op'][9:]} {a['value']:#x}"
            assert any(needle in x["args"] for x in doc["rules"] if x["name"] in r["names"]), needle

    mine, docker = allowed(resolved(os.path.join(POLICY, "seccomp.json"))), allowed(resolved(DOCKER))
    by = {c["name"]: c["diff"] for c in doc["compared"]}
    assert set(by) == set(mine) | set(docker)
    assert {n for n, d in by.items() if d == "only_docker"} == set(docker) - set(mine)
    assert {n for n, d in by.items() if d == "only_lensbox"} == set(mine) - set(docker)
    assert {n for n, d in by.items() if d == "args_differ"} == {n for n in set(mine) & set(docker)
                                                                if mine[n] != docker[n]}
    assert {n for n, d in by.items() if d == "only_docker"} >= {"ptrace", "process_vm_readv"}
    assert json.loads(out)["seccomp"]["default"] == "ERRNO(38)"

    # the table people read names every allowed syscall of this architecture, and the Docker sections
    rc, text, _ = lb("policy", "explain", POLICY)
    assert rc == 0
    rows = {l.split()[0] for l in text.splitlines() if l and not l.startswith(" ")}
    for r in doc["rules"]:
        if r["action"] == "ALLOW" and r["native"]:
            assert r["name"] in rows, r["name"]
    assert f"Refused here, allowed by Docker: {sum(1 for c in doc['compared'] if c['diff'] == 'only_docker' and c['native'])}" in text


def test_explain_landlock_and_tiers_from_the_files():
    doc = json.loads(lb("--json", "policy", "explain", POLICY)[1])
    with open(os.path.join(POLICY, "landlock.rules")) as f:
        paths = {l.split()[1] for l in f if l.split() and l.split()[0] in
                 ("read", "exec", "read-exec", "write", "read-write", "dev-ioctl")}
    assert {p["path"] for p in doc["landlock"]["paths"]} == paths
    with open(os.path.join(POLICY, "network", "denied.list")) as f:
        ranges = [l.split("#")[0].strip() for l in f if l.split("#")[0].strip()]
    assert doc["network"]["denied4"] == sum(":" not in r for r in ranges)
    assert doc["network"]["denied6"] == sum(":" in r for r in ranges)
    with open(os.path.join(POLICY, "network", "web.nft")) as f:
        ports = re.search(r"elements = \{ ([0-9, ]+) \}", f.read()).group(1).strip()
    tiers = {t["tier"]: t for t in doc["network"]["tiers"]}
    assert set(tiers) == {"off", "packages", "web"}
    assert f"web: TCP {ports} to any address not in denied.list ({doc['network']['denied4']} IPv4" in \
        tiers["web"]["summary"]
    for t in tiers.values():
        assert t["unexplained"] == [], t
    assert "no UDP, no ICMP, IPv6 under the same rules" in tiers["web"]["summary"]
    assert "no UDP, no ICMP, IPv6 under the same rules" in tiers["packages"]["summary"]
    assert "only through lensboxd's relay" in tiers["packages"]["summary"]


def test_explain_shows_a_rule_its_words_do_not_cover(copy):
    break_line(copy, "network/web.nft", "\t\tjump {{SB}}_refuse\n\t}\n}", "\t\tudp dport 123 accept\n"
               "\t\tjump {{SB}}_refuse\n\t}\n}")
    doc = json.loads(lb("--json", "policy", "explain", str(copy))[1])
    web = [t for t in doc["network"]["tiers"] if t["tier"] == "web"][0]
    assert web["unexplained"] == ["chain {{SB}}_fwd: udp dport 123 accept"]
    assert "UDP forwarded" in web["summary"]


# ---- diff, in namespaces of this test's own ----

@pytest.fixture
def nets(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("diff reads an nftables table: needs root")
    tag = uuid.uuid4().hex[:8]
    names = [f"lbpol-{tag}-{x}" for x in ("host", "web", "pkg", "empty")]
    for n in names:
        subprocess.run(["ip", "netns", "add", n], check=True)
    conf = tmp_path / "lensboxd.conf"
    # lensbox-net runs the services as threads (services_uid 0) and asks this upstream
    conf.write_text("services_uid = 0\ndns_upstream = 192.0.2.53:53\n")
    p = subprocess.Popen(["ip", "netns", "exec", names[0], LENSBOX_NET, "serve", "--policy", POLICY, "--dns",
                          "192.0.2.53:53"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for name, ns, tier in (("chat-1", names[1], "web"), ("chat-2", names[2], "packages")):
            p.stdin.write(f"attach {name} /run/netns/{ns} {tier}\n")
            p.stdin.flush()
            assert p.stdout.readline().startswith("ok"), tier
        # sealed: the host namespace has lo and the two sandboxes' veths, nothing else
        links = json.loads(subprocess.run(["ip", "-n", names[0], "-j", "link"], capture_output=True, text=True,
                                          check=True).stdout)
        assert sorted(l["ifname"] for l in links) == ["lbh0", "lbh1", "lo"]
        yield names, str(conf)
    finally:
        p.stdin.close()
        p.wait(timeout=30)
        for n in names:
            subprocess.run(["ip", "netns", "del", n])


def nft(ns, *args):
    return subprocess.run(["ip", "netns", "exec", ns, "nft", *args], capture_output=True, text=True, check=True)


def test_diff_untouched_then_rules_added_by_hand(nets):
    (host, _, _, empty), conf = nets
    rc, out, err = lb("policy", "diff", POLICY, "--config", conf, ns=host)
    assert (rc, out) == (0, f"inet lensbox (with 2 sandboxes' rules) is what lensboxd loads from {POLICY}\n"), err

    nft(host, "add", "rule", "inet", "lensbox", "to_host", "iifname", "eth9", "accept")
    rc, out, err = lb("policy", "diff", POLICY, "--config", conf, ns=host)
    assert rc == 1, out + err
    lines = out.splitlines()
    assert lines == ['added    rule to_host: iifname "eth9" accept',
                     f"inet lensbox (with 2 sandboxes' rules) differs from {POLICY} in 1 place"], out
    doc = json.loads(lb("--json", "policy", "diff", POLICY, "--config", conf, ns=host)[1])
    assert doc["drift"] is True and [(d["change"], d["what"]) for d in doc["differences"]] == \
        [("added", "rule to_host")]

    # a sandbox's chain that no longer matches its tier's template; the removed base rule too
    handles = json.loads(nft(host, "-a", "-j", "list", "chain", "inet", "lensbox", "to_host").stdout)
    handle = [o["rule"]["handle"] for o in handles["nftables"] if "rule" in o and "eth9" in json.dumps(o)][0]
    nft(host, "delete", "rule", "inet", "lensbox", "to_host", "handle", str(handle))
    assert lb("policy", "diff", POLICY, "--config", conf, ns=host)[0] == 0
    nft(host, "insert", "rule", "inet", "lensbox", "sb0_fwd", "udp", "dport", "53", "accept")
    nft(host, "flush", "chain", "inet", "lensbox", "sb1_in")
    rc, out, _ = lb("policy", "diff", POLICY, "--config", conf, ns=host)
    assert rc == 1
    assert "added    rule sb0_fwd: udp dport 53 accept\n" in out, out
    # packages.nft's sb_in: DNS, the relay over IPv4 and IPv6, the refusal
    assert "removed  rule sb1_in: jump sb1_refuse\n" in out and out.count("removed  rule sb1_in: ") == 4, out

    # no table: said plainly, nothing to compare
    rc, out, _ = lb("policy", "diff", POLICY, "--config", conf, ns=empty)
    assert rc == 0 and out.startswith("no table inet lensbox is loaded in this network namespace"), out


def test_help_and_usage_errors():
    rc, out, _ = lb("--help")
    assert rc == 0 and "policy check [DIR]" in out and "policy explain [DIR]" in out and "policy diff [DIR]" in out
    for args in (["policy"], ["policy", "frobnicate"], ["policy", "check", "a", "b"], ["policy", "explain", "--no-nft"],
                 ["ls", "--config", "x"]):
        rc, out, err = lb(*args)
        assert rc == 2 and out == "" and err.startswith("lensbox: "), (args, rc, out, err)
    rc, _, err = lb("policy", "check", "/nonexistent-policy-dir")
    assert rc == 1 and "opening the policy directory /nonexistent-policy-dir" in err


def test_diff_with_warm_slots(tmp_path):
    """Warm slots (lensbox-net --warm-slots, lensboxd's network_warm_slots): a slot's chains loaded without its map
    elements are what lensboxd loads, not drift; a rule added to one is."""
    if os.geteuid() != 0:
        pytest.skip("diff reads an nftables table: needs root")
    tag = uuid.uuid4().hex[:8]
    host, web = f"lbpol-{tag}-host", f"lbpol-{tag}-web"
    for n in (host, web):
        subprocess.run(["ip", "netns", "add", n], check=True)
    conf = tmp_path / "lensboxd.conf"
    conf.write_text("services_uid = 0\ndns_upstream = 192.0.2.53:53\n")
    p = subprocess.Popen(["ip", "netns", "exec", host, LENSBOX_NET, "serve", "--policy", POLICY, "--dns",
                          "192.0.2.53:53", "--warm-slots", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.stdin.write(f"attach chat-1 /run/netns/{web} web\n")
        p.stdin.flush()
        assert p.stdout.readline().startswith("ok lbh16382 "), "a warm web slot (from the pool's top) is used"
        rc, out, err = lb("policy", "diff", POLICY, "--config", str(conf), ns=host)
        assert (rc, out) == (0, f"inet lensbox (with 1 sandboxes' rules and 3 warm slots') is what lensboxd loads "
                                f"from {POLICY}\n"), out + err
        doc = json.loads(lb("--json", "policy", "diff", POLICY, "--config", str(conf), ns=host)[1])
        assert (doc["sandboxes"], doc["warm_slots"], doc["drift"]) == (1, 3, False), doc
        nft(host, "insert", "rule", "inet", "lensbox", "sb16380_in", "accept")  # a warm packages slot's chain
        rc, out, _ = lb("policy", "diff", POLICY, "--config", str(conf), ns=host)
        assert rc == 1 and "added    rule sb16380_in: accept\n" in out, out
    finally:
        p.stdin.close()
        p.wait(timeout=30)
        for n in (host, web):
            subprocess.run(["ip", "netns", "del", n])
