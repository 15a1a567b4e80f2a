"""launch.py — runs the selected tests inside the VM lane guest (root, in the guest only).

Reads /lensbox-vm/config.json (written by run-vm on the host: environment, working directory, pytest arguments),
places itself in the delegated cgroup the way systemd and a delegated daemon would, and runs pytest with that
environment. Its exit status is pytest's; 6 when the cgroup setup fails (the lane then proves nothing).
"""
import json
import os
import subprocess
import sys

CG = "/sys/fs/cgroup"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def delegate(unit):
    # systemd starts the unit's main process in the unit's cgroup, with the controllers enabled above it.
    write(f"{unit}/cgroup.procs", "0")
    # The delegated daemon moves itself into a leaf, so the unit's cgroup has no processes of its own and may
    # enable controllers for the sandboxes' cgroups it will create next to that leaf.
    write(f"{unit}/supervisor/cgroup.procs", "0")
    for c in open(f"{unit}/cgroup.controllers").read().split():
        write(f"{unit}/cgroup.subtree_control", f"+{c}")
    print(f"launch: in {open('/proc/self/cgroup').read().strip()}; {unit} subtree_control: "
          f"{open(f'{unit}/cgroup.subtree_control').read().strip()}", flush=True)


def main():
    config = json.load(open("/lensbox-vm/config.json"))
    env = config["env"]
    try:
        delegate(env["LENSBOX_VM_CGROUP_DELEGATE"])
    except OSError as e:
        print(f"launch: delegating the cgroup subtree failed: {e}", flush=True)
        return 6
    cmd = ["/usr/bin/python3", "-m", "pytest", *config["pytest_args"]]
    print("launch: " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=config["cwd"]).returncode


if __name__ == "__main__":
    sys.exit(main())
