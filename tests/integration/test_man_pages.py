"""The man pages (docs/man/*.md, built by pandoc into <build>/man) build and render with `man -l`, and say what the
programs do: lensbox(1) names every command `lensbox --help` lists, lensboxd.conf(5) every configuration key. And
`lensbox COMMAND --help` answers for every command."""

import os
import re
import subprocess

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SRC, "build"))
MAN = os.path.join(BUILD, "man")
LENSBOX = os.path.join(BUILD, "clients", "cli", "lensbox")
PAGES = ["lensboxd.8", "lensbox.1", "lensbox-image.1", "lensbox-runner.1", "lensboxd.conf.5"]


def render(page):
    path = os.path.join(MAN, page)
    assert os.path.isfile(path), f"{path} was not built: pandoc missing? (scripts/install-deps installs it)"
    p = subprocess.run(["man", "-l", path], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0", "PAGER": "cat"})
    assert p.returncode == 0, p.stderr
    return re.sub(r".\x08", "", p.stdout)  # no overstrike


@pytest.mark.parametrize("page", PAGES)
def test_page_renders(page):
    text = render(page)
    name, section = page.rsplit(".", 1)
    assert text.startswith(f"{name.upper()}({section})"), text[:100]
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION"):
        assert re.search(rf"^{heading}$", text, re.M), heading
    assert f"{name} -" in text or f"{name} \u2010" in text
    assert "@VERSION@" not in text and "lensbox 0.1.0" in text


def commands():
    out = subprocess.run([LENSBOX, "--help"], capture_output=True, text=True).stdout
    return sorted({m.group(1) for m in re.finditer(r"^  ([a-z]+)\b", out, re.M)})


def test_lensbox_page_names_every_command():
    text = render("lensbox.1")
    cmds = commands()
    assert {"run", "doctor", "policy", "image", "health"} <= set(cmds), cmds
    section = text[text.index("\nCOMMANDS\n"):text.index("\nOPTIONS\n")]
    for c in cmds:
        assert re.search(rf"\b{c}\b", section), f"lensbox(1) does not describe `{c}`"


def test_conf_page_names_every_key():
    render("lensboxd.conf.5")
    # the roff source: rendered, the narrow table columns hyphenate long keys
    with open(os.path.join(MAN, "lensboxd.conf.5")) as f:
        text = f.read()
    with open(os.path.join(SRC, "supervisor", "lensboxd.conf")) as f:
        keys = re.findall(r"^#([a-z_]+) =", f.read(), re.M)
    assert len(keys) > 30
    for k in keys:
        assert k in text, k


@pytest.mark.parametrize("cmd", commands())
def test_command_help(cmd):
    p = subprocess.run([LENSBOX, cmd, "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("Usage: lensbox") and lines[1].startswith(f"  {cmd}"), p.stdout
    assert all(not re.match(r"^  [a-z]", l) or l.startswith(f"  {cmd}") for l in lines[1:]), "other commands' lines"


def test_unknown_command_help_is_a_usage_error():
    p = subprocess.run([LENSBOX, "frobnicate", "--help"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown command" in p.stderr
