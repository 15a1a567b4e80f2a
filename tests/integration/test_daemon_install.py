"""`cmake --install` puts lensboxd, its unit, its configuration and the reviewed policy where the unit expects them,
and what it installs is usable: the unit delegates cgroups and starts the installed binary with the installed
configuration, the installed configuration parses, and the installed policy is the source tree's."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import BUILD_DIR, SOURCE_DIR  # noqa: E402


def install(tmp_path):
    p = subprocess.run(["cmake", "--install", BUILD_DIR], env=dict(os.environ, DESTDIR=str(tmp_path)),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    cache = open(os.path.join(BUILD_DIR, "CMakeCache.txt")).read()
    prefix = [line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("CMAKE_INSTALL_PREFIX:")][0]
    return str(tmp_path) + prefix, prefix


def test_install_layout_and_unit(tmp_path):
    root, prefix = install(tmp_path)
    sysconf = "/etc" if prefix == "/usr" else prefix + "/etc"
    lensboxd = os.path.join(root, "sbin", "lensboxd")
    assert os.access(lensboxd, os.X_OK)
    unit = open(os.path.join(root, "lib", "systemd", "system", "lensboxd.service")).read()
    lines = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in unit.splitlines() if "=" in line and not line.startswith("#")}
    assert lines["Delegate"] == "yes"
    assert lines["ExecStart"] == f"{prefix}/sbin/lensboxd --config {sysconf}/lensbox/lensboxd.conf"
    assert lines["KillMode"] == "mixed"
    conf = str(tmp_path) + f"{sysconf}/lensbox/lensboxd.conf"
    assert os.path.isfile(conf)
    # every key of the installed file is a real one: uncommented, it still parses
    text = open(conf).read()
    keys = re.compile(r"^#([a-z_]+) = ")
    uncommented = "\n".join(line[1:] if keys.match(line) else line for line in text.splitlines())
    assert len(re.findall(r"(?m)^[a-z_]+ = ", uncommented)) >= 25
    (tmp_path / "all.conf").write_text(uncommented)
    p = subprocess.run([lensboxd, "--config", str(tmp_path / "all.conf"), "--check-config"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    # the binary's own default config path is the installed one
    help_text = subprocess.run([lensboxd, "--help"], capture_output=True, text=True).stdout
    assert f"{sysconf}/lensbox/lensboxd.conf" in help_text
    policy = str(tmp_path) + f"{sysconf}/lensbox/policy"
    for name in ("seccomp.json", "landlock.rules", "limits.conf"):
        assert open(os.path.join(policy, name), "rb").read() == open(os.path.join(SOURCE_DIR, "policy", name), "rb").read()
    assert not os.path.exists(os.path.join(policy, "src"))
    assert os.path.isfile(os.path.join(root, "share", "doc", "lensbox", "operations.md"))


def test_open_file_limit_is_raised_outside_the_unit():
    """Started by hand with a soft limit of 1024 open files, lensboxd raises its own to the hard limit (at most 65536,
    as the unit's LimitNOFILE): a few busy sandboxes' relayed connections would otherwise exhaust it."""
    import resource
    from lensbox_testlib.lensboxd import Daemon
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        with Daemon() as d:
            limits = open(f"/proc/{d.proc.pid}/limits").read()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    row = [line for line in limits.splitlines() if line.startswith("Max open files")][0].split()
    assert int(row[3]) == want, row
