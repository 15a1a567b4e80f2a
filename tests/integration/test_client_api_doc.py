"""Every curl command in docs/api.md runs against a real lensboxd and gets a 2xx: the contract's examples are commands
that work, not illustrations. (Socket and sandbox name are swapped for the test daemon's; the examples that name
things the page cannot know, a file a program wrote, a run id, a registry and an archive on the host, get ones that
exist: docker-registry on loopback filled with the default image, and the recipe's archive. The daemon has an image
store of its own, since the image examples pull, import and remove. A streamed pull's last line must be its result,
not an error.)"""

import os
import re
import shlex
import subprocess
import sys

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "tests"), os.path.join(SRC, "clients", "python")]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lensbox_testlib.images import default_image_archive, import_default_image  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402
from test_image_pull import Registry, push  # noqa: E402


def doc_curls():
    with open(os.path.join(SRC, "docs", "api.md"), encoding="utf-8") as f:
        text = f.read()
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith("curl "):
                cmds.append(cmd.strip())
    return cmds


def test_every_curl_example_works(tmp_path):
    cmds = doc_curls()
    assert len(cmds) >= 13, "docs/api.md shows a curl command for every endpoint"
    (tmp_path / "in.csv").write_text("a,b\n1,2\n")
    store = tmp_path / "images"
    import_default_image(store)
    (tmp_path / "registry").mkdir()
    registry = Registry(tmp_path / "registry", {})
    try:
        push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{registry.host}/python:3.12-slim")
        run_examples(cmds, tmp_path, str(store), registry.host)
    finally:
        registry.stop()


def run_examples(cmds, tmp_path, store, registry_host):
    with Daemon(images_dir=store, settings={"insecure_registries": registry_host}) as d:
        name = d.name("doc")
        c = d.client()
        for cmd in cmds:
            if "/files/plots/out.png" in cmd:  # a file a program made
                c.run(name, "python", "import os\nos.makedirs('plots', exist_ok=True)\n"
                      "open('plots/out.png', 'wb').write(b'\\x89PNG')")
            if "/v1/runs/01" in cmd:  # a run that exists
                cmd = re.sub(r"/v1/runs/[0-9a-z]{26}", "/v1/runs/" + c.runs(name, limit=1)[0].id, cmd)
            cmd = cmd.replace("127.0.0.1:5000", registry_host).replace("/srv/python-oci.tar", default_image_archive())
            argv = [a.replace("$S", d.socket).replace("lens-chat-42", name) for a in shlex.split(cmd)]
            argv = [argv[0], "-S", "-w", "\n%{http_code}", *argv[1:]]
            p = subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=120)
            assert p.returncode == 0, (cmd, p.stderr)
            status = int(p.stdout.rpartition(b"\n")[2])
            assert 200 <= status < 300, (cmd, status, p.stdout[-500:])
            if "application/x-ndjson" in cmd:  # a stream answers 200 at once: its last line must be the result
                lines = p.stdout.rpartition(b"\n")[0].splitlines()
                assert b'"phase"' in lines[0] and b'"image"' in lines[-1] and b'"error"' not in lines[-1], (cmd, lines)
        assert (tmp_path / "out.png").read_bytes() == b"\x89PNG"
        assert c.read_file(name, "data/in.csv") == b"a,b\n1,2\n"
