"""Helpers for tests that need the default image (images/recipes/python).

default_image_archive() builds the recipe if it is not cached (about a minute cold, instant cached) and returns the
OCI archive path; default_rootfs() returns an unpacked root directory of it (owned by root, world-readable, setuid
bits stripped: through lensbox-image when the build has it, see the recipe's --rootfs); import_default_image(root)
imports it into an image store of the test's own, as lensboxd reads them. Variant images (the recipe's --with: the
default image plus some Debian packages, cached under their own key) have the same three: variant_image_archive,
variant_rootfs, import_variant_image; ZMQ ("python3-zmq", pyzmq and libzmq) is the one the ZeroMQ tests use (about
two minutes cold, instant cached). All run as root. Standard library only.
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


def lensbox_image_tool():
    """The built lensbox-image (from LENSBOX_BUILD_DIR)."""
    tool = os.path.join(os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SOURCE_DIR, "build")), "images",
                        "lensbox-image")
    if not os.access(tool, os.X_OK):
        raise RuntimeError(f"{tool} is not built (cmake --build the lensbox-image target)")
    return tool


def import_default_image(store_root, name="python:3.12-slim"):
    """Imports the default image into the image store at store_root (created if needed) under name, the way
    lensboxd finds images (lb_images). Returns (config_digest, rootfs). Instant when that store already has it."""
    proc = subprocess.run([lensbox_image_tool(), "--root", str(store_root), "import", default_image_archive(),
                           "--name", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"lensbox-image import failed:\n{proc.stderr[-4000:]}")
    digest, rootfs = proc.stdout.split()
    return digest, rootfs


# Debian's pyzmq (and libzmq5 with it): for ZeroMQ REQ/REP over tcp://127.0.0.1 inside a sandbox.
ZMQ = "python3-zmq"


@functools.lru_cache(maxsize=None)
def variant_image_archive(packages):
    """Path of the OCI archive of the default image plus packages (comma-separated Debian package names)."""
    return _recipe("--with", packages)


@functools.lru_cache(maxsize=None)
def variant_rootfs(packages):
    """Path of an unpacked root filesystem of that variant (shared, cached: treat it as read-only); pass it as
    RunnerEnv.run(image_rootfs=...)."""
    return _recipe("--with", packages, "--rootfs")


def variant_image_name(packages):
    """The name the recipe gives the variant: python:3.12-slim-<packages joined by '-', '+' as 'p'>."""
    return "python:3.12-slim-" + packages.replace(",", "-").replace("+", "p")


def import_variant_image(store_root, packages, name=None):
    """Imports the variant into the image store at store_root under name (default variant_image_name), as
    import_default_image does. Returns (config_digest, rootfs)."""
    proc = subprocess.run([lensbox_image_tool(), "--root", str(store_root), "import", variant_image_archive(packages),
                           "--name", name or variant_image_name(packages)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"lensbox-image import failed:\n{proc.stderr[-4000:]}")
    digest, rootfs = proc.stdout.split()
    return digest, rootfs
