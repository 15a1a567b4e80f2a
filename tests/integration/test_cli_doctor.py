"""`lensbox doctor` (clients/cli/doctor*.c): the report on this machine (hybrid cgroups, no flowtables), its agreement
with a real lensboxd's /v1/health `why_not`, and one simulated failure of each kind of check.

Simulations are real inputs, not stubs: a directory laid out like / (LENSBOX_DOCTOR_ROOT) whose proc/sys/dev/etc
files the same probes read; a config naming a broken policy, a world-open or read-only socket directory, a small tmpfs
as state_dir (both in a private mount namespace), a seccomp filter refusing netlink sockets of one protocol. Each
simulation starts from a root that passes, so a check that failed whatever it read would be caught."""

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "tests")]

from lensbox_testlib.lensboxd import BUILD_DIR, Daemon, shared_images_dir  # noqa: E402

LENSBOX = os.path.join(BUILD_DIR, "clients", "cli", "lensbox")
POLICY = os.path.join(SRC, "policy")


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="lbdoc-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def config(tmp, **keys):
    """A lensboxd.conf whose paths all lie in tmp (socket dir 0750), with the shared image store."""
    sock_dir = os.path.join(tmp, "sock")
    os.makedirs(sock_dir, exist_ok=True)
    os.chmod(sock_dir, 0o750)
    base = {"policy_dir": POLICY, "state_dir": os.path.join(tmp, "state"), "run_dir": os.path.join(tmp, "run"),
            "socket": os.path.join(sock_dir, "lensboxd.sock"), "images_dir": shared_images_dir()}
    base.update(keys)
    path = os.path.join(tmp, "lensboxd.conf")
    write(path, "".join(f"{k} = {v}\n" for k, v in base.items()))
    return path


def doctor(conf, env=None, preexec=None, wrap=()):
    e = dict(os.environ)
    e.pop("LENSBOX_DOCTOR_ROOT", None)
    e.pop("LENSBOX_DOCTOR_LANDLOCK_ABI", None)
    e.update(env or {})
    p = subprocess.run([*wrap, LENSBOX, "--json", "doctor", "--config", conf], capture_output=True, text=True,
                       env=e, timeout=60, preexec_fn=preexec)
    assert p.returncode in (0, 1, 3), p.stderr
    rep = json.loads(p.stdout)
    rep["rc"] = p.returncode
    rep["by"] = {c["name"]: c for c in rep["checks"]}
    return rep


def failing(rep):
    return sorted(n for n, c in rep["by"].items() if c["status"] == "fail")


def assert_explained(check):
    assert check["why"] and check["fix"], check


# ---- a fake root that passes: cgroup v2 with every controller, everything else enabled ----

def fake_root(tmp, cgroup="v2"):
    r = os.path.join(tmp, "root")
    if cgroup == "v2":
        mi = "30 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        write(f"{r}/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    elif cgroup == "hybrid":
        mi = "".join(f"3{i} 30 0:3{i} / /sys/fs/cgroup/{c} rw - cgroup cgroup rw,{c}\n"
                     for i, c in enumerate(["memory", "cpu", "pids", "freezer"]))
        mi += "40 30 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        write(f"{r}/sys/fs/cgroup/unified/cgroup.controllers", "\n")
    else:  # none: a v2 hierarchy without the memory controller
        mi = "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        write(f"{r}/sys/fs/cgroup/cgroup.controllers", "cpu pids\n")
    write(f"{r}/proc/self/mountinfo", "25 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + mi)
    write(f"{r}/proc/self/cgroup", "0::/user.slice\n")
    write(f"{r}/proc/sys/user/max_user_namespaces", "63000\n")
    write(f"{r}/proc/sys/kernel/seccomp/actions_avail", "kill_process kill_thread trap errno user_notif trace log allow\n")
    write(f"{r}/dev/loop-control", "")
    write(f"{r}/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n")
    write(f"{r}/etc/group", "root:x:0:\nalice:x:1000:\n")
    write(f"{r}/etc/subuid", "alice:100000:65536\n")
    write(f"{r}/etc/subgid", "alice:100000:65536\n")
    return r


def sim(tmp, root, **env):
    e = {"LENSBOX_DOCTOR_ROOT": root}
    e.update(env)
    return doctor(config(tmp, networking="off"), env=e)


# ---- this machine ----

def test_this_host_hybrid_and_no_flowtables(tmp):
    mi = open("/proc/self/mountinfo").read()
    v1_memory = any(" - cgroup " in l and "memory" in l.split(" - ")[1] for l in mi.splitlines())
    v2 = any(" - cgroup2 " in l for l in mi.splitlines())
    rep = doctor(config(tmp, networking="on"))
    want = "hybrid" if v1_memory and v2 else "v1" if v1_memory else "v2"
    assert rep["cgroup_layout"] == want and want == "hybrid", rep["cgroup_layout"]
    assert rep["by"]["cgroup"]["value"].startswith("hybrid:")
    # independent of lensbox: nft itself in a throwaway namespace
    nft = subprocess.run(["unshare", "-n", "nft", "add table inet t; add flowtable inet t f "
                          "{ hook ingress priority filter; devices = { lo }; }"], capture_output=True, text=True)
    ft = rep["by"]["flowtables"]
    assert (ft["status"] == "ok") == (nft.returncode == 0), (ft, nft.stderr)
    assert nft.returncode != 0, "this host is documented to lack flowtables"
    assert ft["value"].startswith("missing: ") and "No such file or directory" in ft["value"]
    assert_explained(ft)
    assert "nft_flow_offload" in ft["fix"]
    assert rep["by"]["nftables"]["status"] == "ok" and rep["by"]["veth"]["status"] == "ok"
    assert rep["can_run"] is True and failing(rep) == []
    assert rep["rc"] == 3 and rep["status"] == "warn"  # warnings only


def test_text_output_says_why_and_fix(tmp):
    p = subprocess.run([LENSBOX, "doctor", "--config", config(tmp)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("WARN  flowtables"))
    assert lines[i + 1].startswith("      why: ") and lines[i + 2].startswith("      fix: modprobe")
    assert lines[-1] == "sandboxes can run: yes (with the warnings above)"


def test_all_ok_exits_0(tmp):
    rep = doctor(config(tmp, networking="off"))
    assert rep["rc"] == 0 and rep["status"] == "ok", [c for c in rep["checks"] if c["status"] != "ok"]


# ---- agreement with lensboxd's /v1/health ----

@pytest.mark.parametrize("broken_policy", [False, True])
def test_agrees_with_health(tmp, broken_policy):
    settings = {}
    if broken_policy:
        bad = os.path.join(tmp, "policy")
        shutil.copytree(POLICY, bad)
        with open(os.path.join(bad, "landlock.rules"), "a") as f:
            f.write("read-exec relative/path\n")
        settings["policy_dir"] = bad
    with Daemon(settings=settings) as d:
        _, h = d.request("GET", "/v1/health")
        conf = config(tmp, policy_dir=settings.get("policy_dir", POLICY), state_dir=d.state, run_dir=d.run_dir,
                      images_dir=d.images, networking="off", uid_range_start=d.uid_start, uid_range_count=10000)
        rep = doctor(conf)
    assert rep["can_run"] == h["can_run"] and rep["why_not"] == h["why_not"], (rep["why_not"], h["why_not"])
    assert h["can_run"] is (not broken_policy)
    if broken_policy:
        pol = rep["by"]["policy"]
        assert pol["status"] == "fail" and "landlock.rules:" in pol["value"], pol
        assert_explained(pol)
        assert rep["rc"] == 1


# ---- simulated hosts: one failing check of each kind ----

def test_sim_base_root_passes(tmp):
    rep = sim(tmp, fake_root(tmp))
    assert rep["simulated_root"] and rep["cgroup_layout"] == "v2"
    assert failing(rep) == [] and rep["can_run"] is True, rep["checks"]


def test_sim_hybrid_layout(tmp):
    rep = sim(tmp, fake_root(tmp, "hybrid"))
    assert rep["cgroup_layout"] == "hybrid" and "no controllers" in rep["by"]["cgroup"]["value"]


def test_sim_no_usable_cgroup(tmp):
    rep = sim(tmp, fake_root(tmp, "none"))
    assert failing(rep) == ["cgroup"] and rep["cgroup_layout"] == "none"
    assert "no usable cgroup hierarchy" in rep["why_not"]
    assert_explained(rep["by"]["cgroup"])


@pytest.mark.parametrize("name,path,content", [
    ("user-namespaces", "proc/sys/user/max_user_namespaces", "0\n"),
    ("seccomp", "proc/sys/kernel/seccomp/actions_avail", "kill_process allow\n"),
    ("loop-devices", "dev/loop-control", None),
])
def test_sim_kernel_feature_missing(tmp, name, path, content):
    root = fake_root(tmp)
    if content is None:
        os.unlink(os.path.join(root, path))
    else:
        write(os.path.join(root, path), content)
    rep = sim(tmp, root)
    assert failing(rep) == [name], rep["checks"]
    assert rep["can_run"] is False and rep["rc"] == 1 and rep["why_not"]
    assert_explained(rep["by"][name])


def test_sim_landlock_below_policy(tmp):
    rep = sim(tmp, fake_root(tmp), LENSBOX_DOCTOR_LANDLOCK_ABI="3")
    assert failing(rep) == ["landlock"] and "below the policy's minimum 6" in rep["why_not"]
    assert_explained(rep["by"]["landlock"])


def test_sim_landlock_degraded_is_a_warning(tmp):
    pol = os.path.join(tmp, "policy")
    shutil.copytree(POLICY, pol)
    with open(os.path.join(pol, "landlock.rules"), "a") as f:
        f.write("degraded_min_abi 3\n")
    rep = doctor(config(tmp, networking="off", policy_dir=pol),
                 env={"LENSBOX_DOCTOR_ROOT": fake_root(tmp), "LENSBOX_DOCTOR_LANDLOCK_ABI": "4"})
    assert rep["by"]["landlock"]["status"] == "warn" and rep["can_run"] is True, rep["by"]["landlock"]


@pytest.mark.parametrize("file,line,who", [
    ("etc/passwd", "svc:x:1000000005:1000000005::/:/usr/sbin/nologin\n", "svc"),
    ("etc/subuid", "bob:1000100000:65536\n", "bob"),
    ("etc/group", "grp:x:1000196607:\n", "grp"),
])
def test_sim_uid_range_overlap(tmp, file, line, who):
    root = fake_root(tmp)
    with open(os.path.join(root, file), "a") as f:
        f.write(line)
    rep = sim(tmp, root)
    u = rep["by"]["uid-range"]
    assert failing(rep) == ["uid-range"] and who in u["value"], u
    assert_explained(u)
    assert "uid_range_start = " in u["fix"]
    # the suggested start really is free: doctor agrees with itself
    start = int(u["fix"].split("uid_range_start = ")[1].split("`")[0])
    rep2 = doctor(config(tmp, networking="off", uid_range_start=start), env={"LENSBOX_DOCTOR_ROOT": root})
    assert rep2["by"]["uid-range"]["status"] == "ok", rep2["by"]["uid-range"]


def test_sim_uid_range_just_outside_passes(tmp):
    root = fake_root(tmp)
    with open(os.path.join(root, "etc/passwd"), "a") as f:
        f.write("edge:x:1000196608:1::/:/bin/sh\nlow:x:999999999:1::/:/bin/sh\n")
    assert sim(tmp, root)["by"]["uid-range"]["status"] == "ok"


@pytest.mark.parametrize("file,line,status", [
    ("etc/passwd", "mallory:x:999999998:999999998::/:/bin/sh\n", "warn"),   # another account holds the API uid
    ("etc/subuid", "bob:999990000:65536\n", "warn"),                       # another tool's namespaces map it
    ("etc/passwd", "lensbox-api:x:999999998:999999998::/:/usr/sbin/nologin\n", "ok"),  # the package's account
])
def test_sim_api_user_shared(tmp, file, line, status):
    root = fake_root(tmp)
    with open(os.path.join(root, file), "a") as f:
        f.write(line)
    c = sim(tmp, root)["by"]["api-user"]
    assert c["status"] == status and "999999998" in c["value"], c
    if status == "warn":
        assert_explained(c)
        assert line.split(":")[0] in c["value"], c


def test_api_user_that_does_not_exist(tmp):
    rep = doctor(config(tmp, api_user="lensbox-no-such-user"))
    c = rep["by"]["config"]
    assert rep["rc"] == 1 and c["status"] == "fail" and "api_user `lensbox-no-such-user` does not exist" in c["value"], c
    assert_explained(c)


def test_config_that_does_not_parse(tmp):
    conf = config(tmp)
    with open(conf, "a") as f:
        f.write("max_running = many\n")
    rep = doctor(conf)
    c = rep["by"]["config"]
    assert c["status"] == "fail" and "max_running" in c["value"] and ":" in c["value"], c
    assert_explained(c)


def test_policy_file_broken(tmp):
    pol = os.path.join(tmp, "policy")
    shutil.copytree(POLICY, pol)
    write(os.path.join(pol, "limits.conf"), open(os.path.join(POLICY, "limits.conf")).read() + "bogus_key 1\n")
    rep = doctor(config(tmp, networking="off", policy_dir=pol))
    p = rep["by"]["policy"]
    assert p["status"] == "fail" and "limits.conf:" in p["value"], p
    assert rep["why_not"].startswith(f"the policy in {pol} could not be loaded: ")


def test_socket_dir_open_to_everyone(tmp):
    conf = config(tmp, networking="off")
    os.chmod(os.path.join(tmp, "sock"), 0o777)
    s = doctor(conf)["by"]["socket-dir"]
    assert s["status"] == "fail" and "accessible to every user" in s["value"] and "chmod 0750" in s["fix"], s


def test_socket_dir_read_only(tmp):
    conf = config(tmp, networking="off")
    sock = os.path.join(tmp, "sock")
    # a read-only tmpfs over the socket directory, in a mount namespace of the test's own
    rep = doctor(conf, wrap=("unshare", "-m", "--propagation", "private", "sh", "-c",
                             f"mount -t tmpfs -o ro,mode=0750 none {sock} && exec \"$@\"", "sh"))
    s = rep["by"]["socket-dir"]
    assert s["status"] == "fail" and "not writable" in s["value"] and "Read-only" in s["value"], s


@pytest.mark.parametrize("size,status", [("100m", "fail"), ("1g", "warn")])
def test_disk_low(tmp, size, status):
    state = os.path.join(tmp, "state")
    os.makedirs(state)
    conf = config(tmp, networking="off")
    rep = doctor(conf, wrap=("unshare", "-m", "--propagation", "private", "sh", "-c",
                             f"mount -t tmpfs -o size={size} none {state} && exec \"$@\"", "sh"))
    assert rep["by"]["disk"]["status"] == status, rep["by"]["disk"]
    assert_explained(rep["by"]["disk"])


def test_images_missing(tmp):
    rep = doctor(config(tmp, networking="off", images_dir=os.path.join(tmp, "nowhere")))
    i = rep["by"]["images"]
    assert i["status"] == "warn" and "does not exist" in i["value"] and "lensbox-image import" in i["fix"], i
    empty = os.path.join(tmp, "store")
    subprocess.run([os.path.join(BUILD_DIR, "images", "lensbox-image"), "--root", empty, "ls"], check=True,
                   capture_output=True)
    i = doctor(config(tmp, networking="off", images_dir=empty))["by"]["images"]
    assert i["status"] == "warn" and "python:3.12-slim" in i["value"], i


# A seccomp filter (classic BPF, installed in the child before exec) answering EPROTONOSUPPORT to
# socket(AF_NETLINK, *, protocol): the kernel as if it had no nf_tables (12) or no rtnetlink (0) for us.
def refuse_netlink(protocol):
    AUDIT_ARCH_X86_64, NR_SOCKET, AF_NETLINK, EPROTONOSUPPORT = 0xC000003E, 41, 16, 93
    RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
    LD, JEQ, RET = 0x20, 0x15, 0x06
    prog = [(LD, 0, 0, 4), (JEQ, 0, 6, AUDIT_ARCH_X86_64), (LD, 0, 0, 0), (JEQ, 0, 4, NR_SOCKET),
            (LD, 0, 0, 16), (JEQ, 0, 2, AF_NETLINK), (LD, 0, 0, 32), (JEQ, 1, 0, protocol),
            (RET, 0, 0, RET_ALLOW), (RET, 0, 0, RET_ERRNO | EPROTONOSUPPORT)]
    buf = b"".join(struct.pack("=HBBI", *i) for i in prog)

    def install():
        libc = ctypes.CDLL(None, use_errno=True)
        filt = ctypes.create_string_buffer(buf)
        fprog = struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(filt))
        fp = ctypes.create_string_buffer(fprog)
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, fp, 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return install


@pytest.mark.parametrize("protocol,name", [(12, "nftables"), (0, "veth")])
def test_network_pieces_missing(tmp, protocol, name):
    rep = doctor(config(tmp, networking="on"), preexec=refuse_netlink(protocol))
    c = rep["by"][name]
    assert c["status"] == "warn" and c["value"] != "" and "ok" not in c["value"].split(), c
    assert_explained(c)
    other = "veth" if name == "nftables" else "nftables"
    assert rep["by"][other]["status"] == "ok", rep["by"][other]
    assert rep["can_run"] is True  # the tiers are lost, `off` sandboxes still run


# ---- IPv6 for web (netfilter/src/net.c decides it the same way) ----

ROUTE6_DEFAULT = ("00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
                  "fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0\n")
ROUTE6_LINK = ("fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
               "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n")
ROUTE6_REJECT = ("00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
                 "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n")


@pytest.mark.parametrize("force,forwarding,routes,pool6,status,words", [
    (True, "0", ROUTE6_LINK + ROUTE6_DEFAULT, None, "ok", "force_forwarding"),
    (False, "1", ROUTE6_DEFAULT, None, "ok", "all.forwarding is on"),
    (False, "0", ROUTE6_DEFAULT, None, "warn", "no per-interface forwarding"),
    (True, "0", ROUTE6_LINK + ROUTE6_REJECT, None, "ok", "no IPv6 default route"),
    (False, "0", ROUTE6_DEFAULT, "off", "ok", "turned off"),
])
def test_sim_ipv6_for_web(tmp, force, forwarding, routes, pool6, status, words):
    root = fake_root(tmp)
    write(f"{root}/proc/sys/net/ipv6/conf/all/forwarding", forwarding + "\n")
    if force:
        write(f"{root}/proc/sys/net/ipv6/conf/all/force_forwarding", "0\n")
    write(f"{root}/proc/net/ipv6_route", routes)
    keys = {"networking": "on"}
    if pool6:
        keys["network_pool6"] = pool6
    rep = doctor(config(tmp, **keys), env={"LENSBOX_DOCTOR_ROOT": root})
    c = rep["by"]["ipv6"]
    assert c["status"] == status and words in c["value"], c
    if status == "warn":
        assert_explained(c)
        assert "accept_ra=2" in c["fix"] and "all.forwarding=1" in c["fix"], c
