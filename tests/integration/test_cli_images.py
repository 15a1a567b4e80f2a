"""`lensbox image pull|import|ls|inspect|rm` against a real lensboxd with an image store of its own and Debian's
docker-registry on loopback: the tables and lines people read, --json, refusals as one line with lensboxd's code,
usage errors with exit status 2."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]

from lensbox_testlib.lensboxd import BUILD_DIR, Daemon  # noqa: E402
from test_api_images import registry, store_dir, tiny_layout  # noqa: E402,F401  (registry is a fixture)
from test_image_pull import push  # noqa: E402

LENSBOX = os.path.join(BUILD_DIR, "clients", "cli", "lensbox")


def lb(d, *args, cwd=None):
    env = dict(os.environ, LENSBOX_SOCKET=d.socket)
    p = subprocess.run([LENSBOX, *args], capture_output=True, text=True, env=env, timeout=600, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def test_image_verbs(registry, tmp_path):
    assert os.access(LENSBOX, os.X_OK), f"{LENSBOX} is not built"
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "cli")
    hex12 = digests["config"][7:19]
    push(f"oci:{lay}:1", f"{registry.host}/lbtest/cli:2")
    with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": registry.host}) as d:
        assert lb(d, "image", "ls") == (0, "No images.\n", "")

        # a relative path: the CLI makes it absolute for lensboxd
        rc, out, err = lb(d, "image", "import", "lay", "--name", "lbtest/cli:1", cwd=tmp_path)
        assert rc == 0, err
        assert out.startswith(f"imported docker.io/lbtest/cli:1: {hex12} ("), out

        rc, out, err = lb(d, "image", "ls")
        assert rc == 0, err
        header, row = out.splitlines()
        assert header.split() == ["NAME", "DIGEST", "SIZE", "IN", "USE", "PINNED", "LAST", "USED"], header
        assert row.split()[:5] == ["docker.io/lbtest/cli:1", hex12, "3", "B", "0"], row

        rc, out, _ = lb(d, "--json", "image", "ls")
        assert rc == 0 and json.loads(out)["images"][0]["digest"] == digests["config"]

        for ref in ("lbtest/cli:1", digests["config"], hex12):
            rc, out, err = lb(d, "image", "inspect", ref)
            assert rc == 0, (ref, err)
            assert f"digest:       {digests['config']}" in out and "python3:      yes" in out, out
        rc, out, _ = lb(d, "--json", "image", "inspect", "lbtest/cli:1")
        assert json.loads(out)["image"]["manifest_digest"] == digests["manifest"]

        # in use by a sandbox: rm refused with lensboxd's code, the count shown by ls
        name = d.name("cli")
        assert d.request("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/cli:1"})[0] == 201
        assert lb(d, "image", "ls")[1].splitlines()[1].split()[4] == "1"
        rc, out, err = lb(d, "image", "rm", "lbtest/cli:1")
        assert rc == 1 and out == "" and err.rstrip().endswith("(image_in_use)") and name in err, err
        assert d.request("DELETE", f"/v1/sandboxes/{name}")[0] == 200
        assert lb(d, "image", "rm", "lbtest/cli:1") == (0, "removed lbtest/cli:1\n", "")
        rc, _, err = lb(d, "image", "inspect", "lbtest/cli:1")
        assert rc == 1 and "(image_not_found)" in err, err

        rc, out, err = lb(d, "image", "pull", f"{registry.host}/lbtest/cli:2")
        assert rc == 0, err
        assert out.startswith(f"pulled {registry.host}/lbtest/cli:2: {hex12} ("), out
        rc, _, err = lb(d, "image", "pull", f"{registry.host}/lbtest/nosuch:1")
        assert rc == 1 and "(image_not_found)" in err and "lbtest/nosuch:1" in err, err
        rc, _, err = lb(d, "image", "import", str(tmp_path / "missing"))
        assert rc == 1 and "No such file" in err, err

        # usage errors
        for args in (["image"], ["image", "frob"], ["image", "ls", "x"], ["image", "pull"],
                     ["ls", "--name", "x"], ["image", "ls", "--name", "x"]):
            rc, _, err = lb(d, *args)
            assert rc == 2, (args, err)
        assert "image pull REF" in lb(d, "--help")[1]
