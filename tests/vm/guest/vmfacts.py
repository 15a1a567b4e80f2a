"""vmfacts.py — what the VM lane's guest kernels offer, shared by the guest tests (runs in the guest only).

Each kernel the lane boots is listed with the Landlock ABI it offers; a kernel the lane does not know fails the tests
that ask, with a message saying where to add it.
"""
import os
import platform

import pytest

# Debian bookworm's 6.1 and bookworm-backports' 6.12.
EXPECTED_ABI = {"6.1": 2, "6.12": 6}


def in_guest():
    return os.environ.get("LENSBOX_VM_LANE") == "1"


def skip_unless_guest():
    if not in_guest():
        pytest.skip("runs in the VM lane guest only (tests/vm/run-vm); its host side is tests/vm/test_vm_lane*.py",
                    allow_module_level=True)


def expected_abi():
    series = ".".join(platform.release().split(".")[:2])
    if series not in EXPECTED_ABI:
        pytest.fail(f"kernel {platform.release()} is unknown to the VM lane: add its Landlock ABI to EXPECTED_ABI")
    return EXPECTED_ABI[series]
