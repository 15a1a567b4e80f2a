"""Build sanity: the binaries CI built exist and carry the hardening the build promises (PIE, full RELRO, stack
protector, _FORTIFY_SOURCE), read from the ELF files themselves with readelf."""
import os
import pathlib
import subprocess

import pytest

BUILD = pathlib.Path(os.environ.get("LENSBOX_BUILD_DIR", "build"))
BINARIES = ["runner/lensbox-runner", "supervisor/lensboxd", "supervisor/cli/lensbox"]


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(params=BINARIES)
def binary(request):
    path = BUILD / request.param
    assert path.is_file(), f"{path} was not built"
    return path


def test_is_position_independent(binary):
    header = readelf("-h", str(binary))
    assert "DYN (Position-Independent Executable file)" in header or "Type:                              DYN" in header


def test_has_full_relro(binary):
    segments = readelf("-l", str(binary))
    dynamic = readelf("-d", str(binary))
    assert "GNU_RELRO" in segments
    assert "BIND_NOW" in dynamic or "NOW" in dynamic.split("FLAGS_1", 1)[-1]


def test_stack_is_not_executable(binary):
    segments = readelf("-l", str(binary))
    stack = [line for line in segments.splitlines() if "GNU_STACK" in line]
    assert stack and "RWE" not in stack[0]


def test_stack_protector_and_fortify(binary):
    symbols = readelf("--dyn-syms", str(binary))
    assert "__stack_chk_fail" in symbols
    assert any(name in symbols for name in ("__snprintf_chk", "__memcpy_chk", "__read_chk", "__vsnprintf_chk",
                                            "__fprintf_chk", "__printf_chk", "__strcpy_chk"))
