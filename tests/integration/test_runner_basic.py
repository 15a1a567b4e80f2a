"""lensbox-runner end to end: a program runs in a sandbox with every layer on, and its status comes back exactly.

Covers the done-when line (python3 prints 45; the JSON names the Landlock ABI, cgroup version and seccomp state),
exit codes and signals, a setup failure that names its step, and the process state a program starts with (uid,
capabilities, securebits, no_new_privs, seccomp mode, clean environment, fds 0-2 only, stdin /dev/null, cwd).
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.runner import RunnerEnv, kernel_landlock_abi  # noqa: E402


def host_cgroup_version():
    """v2 when the cgroup2 hierarchy carries memory, cpu and pids (the VM lane), else v1 (this CI's hybrid host)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                with open(os.path.join(fields[4], "cgroup.controllers")) as c:
                    if {"memory", "cpu", "pids"} <= set(c.read().split()):
                        return "v2"
    return "v1"


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def test_sum_prints_45_with_isolation_report(env):
    r = env.python("print(sum(range(10)))")
    assert r.rc == 0
    assert r["stdout"] == "45\n"
    assert r["exit_code"] == 0 and r["signal"] == 0 and not r["timed_out"]
    iso = r["isolation"]
    assert iso["landlock_abi"] == min(kernel_landlock_abi(), 7)  # the kernel's best, up to the newest the runner knows
    assert iso["cgroup_version"] == host_cgroup_version()
    assert iso["seccomp"]["mode"] == 2 and iso["seccomp"]["allowed_syscalls"] > 100
    assert set(iso["namespaces"]) == {"user", "mnt", "pid", "ipc", "uts", "net", "cgroup"}
    # its root (0), user (1000) and nobody (65534): host ids of its own, 65536 apart
    assert iso["uid_map"] == "0 331072 1\n1000 200000 1\n65534 265536 1"


def test_exit_code_and_signal(env):
    r = env.python("import sys; sys.exit(3)")
    assert (r.rc, r["exit_code"], r["signal"]) == (0, 3, 0)
    r = env.python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert (r.rc, r["exit_code"], r["signal"]) == (0, -1, 11)


def test_missing_program_fails_and_names_execve(env):
    r = env.run(["no-such-program-xyz"])
    assert r.rc == 1
    assert "execve" in r["error"] and "No such file or directory" in r["error"]


def test_bad_cwd_fails_and_names_the_step(env):
    r = env.run(["true"], flags=["--cwd", "/does/not/exist"])
    assert r.rc == 1
    assert "chdir" in r["error"]


def test_start_failing_after_the_clone_undoes_it(env, tmp_path):
    """The image path is refused by the root's preparation (overlay cannot name a ',' path), which runs after the init
    child was cloned and before it is released: the child is killed and reaped, the thread that cloned it joined,
    and nothing is left (the module's fixture checks mounts, loop devices and cgroups)."""
    from lensbox_testlib.runner import rootfs
    link = tmp_path / "image,with-comma"
    link.symlink_to(rootfs())
    for _ in range(3):
        r = env.run(["true"], image_rootfs=str(link), timeout=30)
        assert r.rc == 1
        assert "preparing the root filesystem" in r["error"] and "without ','" in r["error"], r["error"]


PROBE = r"""
import json, os
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
print(json.dumps({
  'uid': os.getresuid(), 'gid': os.getresgid(), 'groups': os.getgroups(),
  'caps': {k: status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
  'nnp': status['NoNewPrivs'].strip(), 'seccomp': status['Seccomp'].strip(),
  'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
  'stdin': os.readlink('/proc/self/fd/0'), 'cwd': os.getcwd(), 'env': dict(os.environ),
  'pid': os.getpid(), 'hostname': os.uname().nodename,
  'dumpable_core': open('/proc/self/limits').read().split('Max core file size')[1].split()[0],
  'root_entries': sorted(os.listdir('/')),
}))
"""


def test_process_state(env):
    r = env.python(PROBE, name="probe-state")
    assert r.rc == 0, r
    s = json.loads(r["stdout"])
    assert s["uid"] == [1000, 1000, 1000] and s["gid"] == [1000, 1000, 1000]
    assert s["groups"] in ([], [1000])
    assert set(s["caps"].values()) == {"0000000000000000"}
    assert s["nnp"] == "1" and s["seccomp"] == "2"
    # 0-2 plus the directory fd listdir itself holds while listing; nothing inherited.
    assert s["fds"] == [0, 1, 2, 3]
    assert s["stdin"] == "/dev/null"
    assert s["cwd"] == "/sandbox"
    e = s["env"]
    assert e["HOME"] == "/sandbox" and e["LANG"] == "C.UTF-8" and e["PYTHONUNBUFFERED"] == "1"
    assert set(e) <= {"HOME", "LANG", "PYTHONUNBUFFERED", "PATH", "PWD"}, e
    assert s["hostname"] == "probe-state"
    assert s["dumpable_core"] == "0"
    assert "sys" in s["root_entries"] and "sandbox" in s["root_entries"]


def test_ignored_signals_of_the_caller_never_reach_the_program(env):
    """SIG_IGN survives execve: a caller that ignores signals (here the shell's trap, inherited by the tool) must
    not hand that to the program, nor a blocked signal. The program's SigIgn and SigBlk are empty."""
    r = env.run(["grep", "^Sig[IB]", "/proc/self/status"],
                wrapper=("sh", "-c", 'trap "" PIPE USR1 HUP TERM; exec "$0" "$@"'))
    assert r.rc == 0, (r.tool_stderr, r.get("error"))
    sig = dict(line.split(":\t") for line in r["stdout"].splitlines())
    assert sig == {"SigBlk": "0000000000000000", "SigIgn": "0000000000000000"}, sig


def test_securebits_locked(env):
    # securebits from prctl(PR_GET_SECUREBITS) through ctypes: NOROOT|NO_SETUID_FIXUP|NO_CAP_AMBIENT_RAISE and the
    # locks of those three plus KEEP_CAPS_LOCKED.
    r = env.python("import ctypes; libc = ctypes.CDLL(None); print(libc.prctl(27, 0, 0, 0, 0))")
    assert r["stdout"].strip() == str(0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80)


def test_extra_env_and_no_host_env(env):
    os.environ["LENSBOX_HOST_SECRET"] = "leak"
    try:
        r = env.python("import os; print(os.environ.get('FOO'), os.environ.get('LENSBOX_HOST_SECRET'))",
                       flags=["--env", "FOO=bar"])
    finally:
        del os.environ["LENSBOX_HOST_SECRET"]
    assert r["stdout"] == "bar None\n"


def test_pid_namespace_sees_only_the_sandbox(env):
    r = env.python("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    pids = json.loads(r["stdout"])
    assert pids[0] == 1 and len(pids) == 2  # the sandbox's init and this program


def test_descriptors_of_the_caller_never_reach_the_program(env, tmp_path):
    # The runner inherits an open file (as lensboxd holds sockets and databases); the program must not see it,
    # not even as a number (runc CVE-2024-21626).
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    fd = os.open(secret, os.O_RDONLY)
    try:
        r = env.run(["python3", "-c", f"import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"],
                    pass_fds=(fd,))
    finally:
        os.close(fd)
    assert r["stdout"] == "[0, 1, 2, 3]\n"


def test_any_valid_name_is_a_valid_hostname(env):
    r = env.run(["hostname"], name="lens_chat.1-x")
    assert r.rc == 0 and r["stdout"] == "lens_chat.1-x\n", r


def test_pid_1_is_lensbox_init_and_out_of_reach(env):
    # pid 1 is the freestanding lensbox-init from a sealed memfd: nothing of the runner's memory, no descriptor,
    # non-dumpable (its /proc files refuse the sandbox's own uid).
    code = (
        "import errno, os\n"
        "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode())\n"
        "status = dict(l.split(':\\t', 1) for l in open('/proc/1/status').read().splitlines() if ':\\t' in l)\n"
        "print(status['Name'].strip(), status['Uid'].split()[0], int(status['VmRSS'].split()[0]) < 1024)\n"
        "for p in ('/proc/1/environ', '/proc/1/fd', '/proc/1/mem', '/proc/1/root/'):\n"
        "    try:\n"
        "        os.listdir(p) if p.endswith(('fd', '/')) else open(p, 'rb').read(1)\n"
        "        print(p, 'OPEN')\n"
        "    except OSError as e:\n"
        "        print(p, errno.errorcode[e.errno])\n"
    )
    r = env.python(code)
    lines = r["stdout"].splitlines()
    assert lines[0] == "lensbox-init"
    assert lines[1] == "memfd:lensbox-i 1000 True"  # comm is cut at 15 characters
    assert lines[2:] == ["/proc/1/environ EACCES", "/proc/1/fd EACCES", "/proc/1/mem EACCES", "/proc/1/root/ EACCES"]


def test_a_narrow_umask_leaves_the_sandbox_usable(env):
    """Started from a shell with umask 077, the tool still makes a root its sandbox's uid can use: the skeleton, the
    /etc files and the mount points it creates come out readable (it sets 0022 itself). Before, the program could
    not even enter its working directory: "chdir to the working directory: Permission denied"."""
    code = ("import os; print(open('/etc/passwd').read().splitlines()[1]); open('/tmp/x', 'w').write('1'); "
            "print(os.getcwd(), sorted(os.listdir('/dev'))[:3])")
    r = env.python(code, wrapper=("sh", "-c", 'umask 077 && exec "$0" "$@"'))
    assert r.rc == 0, (r.tool_stderr, r.get("error"))
    assert r["exit_code"] == 0, r["stderr"]
    lines = r["stdout"].splitlines()
    assert lines[0].startswith("sandbox:x:1000:1000:")
    assert lines[1].startswith("/sandbox ")
