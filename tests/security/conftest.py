"""Fixtures of the security suite: one Lab (root filesystems with the probe, private storage) per test session."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lensbox_testlib.attack import Lab  # noqa: E402


@pytest.fixture(scope="session")
def lab():
    lab = Lab()
    yield lab
    left = lab.close()
    assert not left, f"sandboxes left mounts or loop devices behind: {left}"
