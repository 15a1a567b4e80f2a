"""`pip install clients/python` works offline with Debian's setuptools (--no-build-isolation --no-index), into a
--target directory and into a venv, and what it installs is the whole package: the sync and asyncio clients, the
error classes and py.typed (the package is typed for mypy)."""

import os
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"
CHECK = (
    "import os, lensbox_client, lensbox_client.aio as aio; "
    "assert 'site-packages' in lensbox_client.__file__ or os.environ.get('WANT') in lensbox_client.__file__, "
    "lensbox_client.__file__; "
    "assert os.path.isfile(os.path.join(os.path.dirname(lensbox_client.__file__), 'py.typed')); "
    "assert issubclass(lensbox_client.SandboxNotFound, lensbox_client.SandboxError); "
    "assert aio.AsyncClient and lensbox_client.Client; print(lensbox_client.__version__)"
)


@pytest.fixture
def src_copy(tmp_path):
    # pip builds in the source tree (build/, *.egg-info): build from a copy so the checkout stays clean
    dst = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "clients", "python"), dst,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    return dst


def pip(*args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_install_target_offline(tmp_path, src_copy):
    target = tmp_path / "target"
    pip(PY, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--target", str(target), str(src_copy))
    assert (target / "lensbox_client" / "py.typed").is_file()
    assert (target / "lensbox_client" / "aio.py").is_file() and (target / "lensbox_client" / "errors.py").is_file()
    p = subprocess.run([PY, "-c", CHECK], cwd=str(tmp_path), capture_output=True, text=True,
                       env={"PYTHONPATH": str(target), "WANT": str(target)})
    assert p.returncode == 0 and p.stdout.strip() == "0.1.0", p.stderr


def test_install_venv_offline(tmp_path, src_copy):
    venv = tmp_path / "venv"
    # the system's setuptools builds the package (no index, no build isolation): the venv must see it
    subprocess.run([PY, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    vpy = str(venv / "bin" / "python")
    pip(vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index", str(src_copy))
    p = subprocess.run([vpy, "-c", CHECK], cwd=str(tmp_path), capture_output=True, text=True, env={"WANT": str(venv)})
    assert p.returncode == 0, p.stderr
    show = subprocess.run([vpy, "-m", "pip", "show", "-f", "lensbox-client"], capture_output=True, text=True)
    assert "lensbox_client/aio.py" in show.stdout and "lensbox_client/py.typed" in show.stdout, show.stdout
