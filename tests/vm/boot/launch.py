"""launch.py — runs the selected tests inside the VM lane guest (root, in the guest only).

Reads /lensbox-vm/config.json (written by run-vm on the host: environment, working directory, pytest arguments),
lays out the cgroup v2 tree the way systemd does on a host running lensboxd, and runs pytest in it:

  /sys/fs/cgroup                       every controller enabled in subtree_control (stage2.sh)
  ├── init.scope                       PID 1
  ├── vm-lane.scope                    this launcher and pytest, like a login session's scope (not delegated):
  │                                    lensbox-runner started from here puts sandboxes in /sys/fs/cgroup/lensbox
  └── lensbox.service                  the unit's cgroup, Delegate=yes: systemd marks it with the xattr
                                       trusted.delegate=1 and starts lensboxd in it; the daemon moves itself into a
                                       leaf and creates its sandboxes' cgroups next to it (tests start lensboxd
                                       there through LENSBOX_VM_SYSTEMD_UNIT)
Exit status: pytest's; 6 when the cgroup layout cannot be made (the lane then proves nothing); 7 when pytest
outlived the guest's deadline: then the processes, their kernel stacks and the kernel's blocked tasks are dumped to
the console first (so a hang in lensbox shows where it hangs), and pytest's process group is killed.
"""
import json
import os
import signal
import subprocess
import sys

CG = "/sys/fs/cgroup"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def layout(unit):
    scope = f"{CG}/vm-lane.scope"
    os.mkdir(scope)
    write(f"{scope}/cgroup.procs", "0")
    os.mkdir(unit)
    # What systemd (>= 251) does for Delegate=yes; lensbox's runner reads it to know its cgroup was delegated.
    os.setxattr(unit, "trusted.delegate", b"1")
    print(f"launch: in {open('/proc/self/cgroup').read().strip()}; unit {unit} "
          f"(controllers: {open(f'{unit}/cgroup.controllers').read().strip()})", flush=True)


def main():
    config = json.load(open("/lensbox-vm/config.json"))
    env = config["env"]
    try:
        layout(env["LENSBOX_VM_SYSTEMD_UNIT"])
    except OSError as e:
        print(f"launch: making the cgroup layout failed: {e}", flush=True)
        return 6
    cmd = ["/usr/bin/python3", "-m", "pytest", *config["pytest_args"]]
    print("launch: " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, cwd=config["cwd"], start_new_session=True)
    try:
        return proc.wait(timeout=config["deadline_s"])
    except subprocess.TimeoutExpired:
        print(f"launch: pytest still running after {config['deadline_s']}s: dumping state", flush=True)
        dump_state()
        os.killpg(proc.pid, signal.SIGKILL)  # pytest's own session: every test process it started
        proc.wait()
        return 7


def dump_state():
    subprocess.run(["ps", "-o", "pid,ppid,stat,time,args"])
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state not in ("D", "S") or pid == "1":
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
            if not cmdline:
                continue  # a kernel thread
            with open(f"/proc/{pid}/stack") as f:
                stack = f.read()
            with open(f"/proc/{pid}/cgroup") as f:
                cg = f.read().strip()
            print(f"--- pid {pid} [{state}] {cg} {cmdline}\n{stack}", flush=True)
        except OSError:
            continue
    with open("/proc/sysrq-trigger", "w") as f:
        f.write("w")  # the kernel's list of blocked (D state) tasks, into dmesg
    subprocess.run(["dmesg"], stdout=open("/results/dmesg-at-deadline.txt", "w"))


if __name__ == "__main__":
    sys.exit(main())
