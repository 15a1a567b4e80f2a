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
Exit status: pytest's; 6 when the cgroup layout cannot be made (the lane then proves nothing).
"""
import json
import os
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
    return subprocess.run(cmd, env=env, cwd=config["cwd"]).returncode


if __name__ == "__main__":
    sys.exit(main())
