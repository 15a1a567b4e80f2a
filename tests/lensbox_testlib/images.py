"""Helpers for tests that need the default image (images/recipes/python).

default_image_archive() builds the recipe if it is not cached (about a minute cold, instant cached) and returns the
OCI archive path; default_rootfs() returns an unpacked root directory of it (owned by root, world-readable, setuid
bits stripped). Both run as root, as every lensbox test does. Standard library only.
"""

import functools
import os
import subprocess

SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECIPE = os.path.join(SOURCE_DIR, "images", "recipes", "python")


def _recipe(*args):
    proc = subprocess.run([RECIPE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"images/recipes/python {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


@functools.lru_cache(maxsize=None)
def default_image_archive():
    """Path of the default image's OCI layout archive (a tar), built and cached by the recipe."""
    return _recipe()


@functools.lru_cache(maxsize=None)
def default_rootfs():
    """Path of an unpacked root filesystem of the default image (shared, cached: treat it as read-only)."""
    return _recipe("--rootfs")
