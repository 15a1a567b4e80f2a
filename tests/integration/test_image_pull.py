"""lensbox-image pull against Debian's docker-registry (distribution 2.8) on loopback, filled by skopeo: plain HTTP
with --insecure-registry, HTTPS with a test CA, bearer tokens from a token service written here (JWTs the registry
is configured to trust) with basic credentials from a credentials file, and registry-level basic auth (htpasswd).
Pull by tag and by digest; a multi-platform index; the pulled image resolves to the same rootfs as the recipe's
archive imported directly. A small registry front written here checks what docker-registry cannot show: blob
redirects to another host never carry Authorization, and an interrupted download resumes with a Range request.
Nothing leaves the loopback interface.
"""

import base64
import crypt
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.images import default_image_archive  # noqa: E402
from lensbox_testlib.oci import f, tar_layer  # noqa: E402

TOOL = os.path.join(os.environ.get("LENSBOX_BUILD_DIR", ""), "images", "lensbox-image")
SERVICE, ISSUER = "lensbox-test-registry", "lensbox-test-issuer"


@pytest.fixture(scope="module", autouse=True)
def _tools():
    if os.geteuid() != 0:
        pytest.fail("run as root")
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is not built")
    for t in ("docker-registry", "skopeo", "openssl"):
        if not shutil.which(t):
            pytest.fail(f"{t} is not installed: run scripts/install-deps")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=lensbox test CA",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(d / "srv.key"),
            "-out", str(d / "srv.csr"))
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(d / "srv.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", str(d / "ext"), "-out", str(d / "srv.crt"))
    # the token service's signing key and certificate (the registry's rootcertbundle)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=lensbox token signer",
            "-keyout", str(d / "token.key"), "-out", str(d / "token.crt"))
    return d


class Registry:
    def __init__(self, base, extra):
        self.dir = base
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        cfg = {"version": 0.1, "log": {"level": "warn"},
               "storage": {"filesystem": {"rootdirectory": str(base / "data")}, "delete": {"enabled": True}},
               "http": {"addr": self.host}}
        extra = dict(extra)
        cfg["http"].update(extra.pop("http", {}))
        cfg.update(extra)
        (base / "config.yml").write_text(json.dumps(cfg))  # YAML is a superset of JSON
        self.log = open(base / "registry.log", "w")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(base / "config.yml")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"docker-registry did not start: {(base / 'registry.log').read_text()}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


def push(source, dest, *opts):
    r = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", *opts, source, f"docker://{dest}"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def pull(store, ref, *opts):
    return subprocess.run([TOOL, "--root", str(store), "pull", ref, *opts], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)


def pulled(store, ref, *opts):
    r = pull(store, ref, *opts)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def refused(store, ref, errno_name, *opts, says=None):
    r = pull(store, ref, *opts)
    assert r.returncode == 1, r.stdout
    assert f"errno={errno_name}" in r.stderr, r.stderr
    if says:
        assert says in r.stderr, r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def recipe_digest(tmp_path_factory):
    store = tmp_path_factory.mktemp("import-store")
    r = subprocess.run([TOOL, "--root", str(store), "import", default_image_archive()], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[0]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    reg = Registry(tmp_path_factory.mktemp("plain"), {})
    push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{reg.host}/python:3.12-slim")
    yield reg
    reg.stop()


def test_plain_http_by_tag_and_digest(plain, tmp_path, recipe_digest):
    store = tmp_path / "store"
    ref = f"{plain.host}/python:3.12-slim"
    refused(store, ref, "EIO")  # HTTPS by default: this registry speaks plain HTTP only
    digest, rootfs = pulled(store, ref, "--insecure-registry", plain.host)
    assert digest == recipe_digest  # the same image as the recipe's archive: the same content-addressed rootfs
    assert os.access(os.path.join(rootfs, "usr/bin/python3"), os.X_OK)
    manifest = hashlib.sha256(open(os.path.join(store, "layout/blobs/sha256",
                                                json.loads(subprocess.run(
                                                    [TOOL, "--root", str(store), "inspect", digest],
                                                    stdout=subprocess.PIPE, text=True).stdout)
                                                ["manifest_digest"].split(":")[1]), "rb").read()).hexdigest()
    digest2, rootfs2 = pulled(store, f"{plain.host}/python@sha256:{manifest}", "--insecure-registry", plain.host)
    assert (digest2, rootfs2) == (digest, rootfs)
    refused(store, f"{plain.host}/python@sha256:{'0' * 64}", "ENOENT", "--insecure-registry", plain.host)
    refused(store, f"{plain.host}/nosuch:1", "ENOENT", "--insecure-registry", plain.host)


def test_multi_platform_index(plain, tmp_path):
    lay = str(tmp_path / "multi")
    other = "arm64" if oci.OCI_ARCH == "amd64" else "amd64"
    native, ncfg = oci.write_manifest(lay, [tar_layer([f("usr/bin/python3", b"", 0o755), f("which", b"native")])])
    foreign, _ = oci.write_manifest(lay, [tar_layer([f("which", b"foreign")])], arch=other)
    entries = [dict(foreign, platform={"architecture": other, "os": "linux"}),
               dict(native, platform={"architecture": oci.OCI_ARCH, "os": "linux"})]
    index = json.dumps({"schemaVersion": 2, "mediaType": oci.MT_INDEX, "manifests": entries}).encode()
    idesc = oci.put_blob(lay, index)
    oci.write_index(lay, [dict(mediaType=oci.MT_INDEX, **idesc, annotations={"org.opencontainers.image.ref.name": "m"})])
    push(f"oci:{lay}:m", f"{plain.host}/multi:1", "--all")
    digest, rootfs = pulled(tmp_path / "store", f"{plain.host}/multi:1", "--insecure-registry", plain.host)
    assert digest == ncfg["digest"]
    assert open(os.path.join(rootfs, "which"), "rb").read() == b"native"


@pytest.fixture(scope="module")
def tls(tmp_path_factory, pki):
    reg = Registry(tmp_path_factory.mktemp("tls"), {
        "http": {"tls": {"certificate": str(pki / "srv.crt"), "key": str(pki / "srv.key")}}})
    push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{reg.host}/python:3.12-slim")
    yield reg
    reg.stop()


def test_https_with_test_ca(tls, pki, tmp_path, recipe_digest):
    store = tmp_path / "store"
    ref = f"{tls.host}/python:3.12-slim"
    refused(store, ref, "EIO", says="SSL")  # the system bundle does not know the test CA
    digest, _ = pulled(store, ref, "--ca-file", str(pki / "ca.crt"))
    assert digest == recipe_digest


@pytest.fixture(scope="module")
def htpasswd_registry(tmp_path_factory, pki):
    base = tmp_path_factory.mktemp("basic")
    (base / "htpasswd").write_text(f"lens:{crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
    reg = Registry(base, {"http": {"tls": {"certificate": str(pki / "srv.crt"), "key": str(pki / "srv.key")}},
                          "auth": {"htpasswd": {"realm": "lensbox", "path": str(base / "htpasswd")}}})
    push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{reg.host}/python:3.12-slim",
         "--dest-creds", "lens:s3cret")
    yield reg
    reg.stop()


def credentials(path, host, user, password, style="auth"):
    entry = ({"auth": base64.b64encode(f"{user}:{password}".encode()).decode()} if style == "auth"
             else {"username": user, "password": password})
    path.write_text(json.dumps({"auths": {host: entry}}))
    return str(path)


def test_registry_basic_auth(htpasswd_registry, pki, tmp_path, recipe_digest):
    reg = htpasswd_registry
    ref = f"{reg.host}/python:3.12-slim"
    ca = ("--ca-file", str(pki / "ca.crt"))
    refused(tmp_path / "s0", ref, "EACCES", *ca, says="credentials file has none")
    bad = credentials(tmp_path / "bad.json", reg.host, "lens", "wrong")
    refused(tmp_path / "s1", ref, "EIO", *ca, "--credentials", bad, says="HTTP 401")
    good = credentials(tmp_path / "good.json", reg.host, "lens", "s3cret", style="userpass")
    digest, _ = pulled(tmp_path / "s2", ref, *ca, "--credentials", good)
    assert digest == recipe_digest


# ---- bearer tokens: a token service issuing RS256 JWTs signed with pki/token.key ----

def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class TokenService(http.server.ThreadingHTTPServer):
    def __init__(self, pki, users):
        self.pki, self.users, self.requests = pki, users, []
        super().__init__(("127.0.0.1", 0), TokenHandler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


class TokenHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        auth = self.headers.get("Authorization", "")
        srv.requests.append({"query": q, "authorization": auth})
        user = None
        if auth.startswith("Basic "):
            u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
            if srv.users.get(u) != p:
                self.send_response(401)
                self.end_headers()
                return
            user = u
        if srv.users and user is None:
            self.send_response(401)
            self.end_headers()
            return
        access = []
        for scope in q.get("scope", []):
            typ, name, actions = scope.split(":")
            access.append({"type": typ, "name": name, "actions": actions.split(",")})
        der = subprocess.run(["openssl", "x509", "-in", str(srv.pki / "token.crt"), "-outform", "DER"],
                             stdout=subprocess.PIPE, check=True).stdout
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user or "anonymous", "aud": q.get("service", [""])[0], "exp": now + 600,
                  "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(srv.pki / "token.key")],
                             input=signing_input.encode(), stdout=subprocess.PIPE, check=True).stdout
        body = json.dumps({"token": f"{signing_input}.{b64url(sig)}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory, pki):
    tokens = TokenService(pki, {"lens": "t0ken-pw"})
    base = tmp_path_factory.mktemp("token")
    reg = Registry(base, {"auth": {"token": {"realm": f"http://127.0.0.1:{tokens.port}/token", "service": SERVICE,
                                             "issuer": ISSUER, "rootcertbundle": str(pki / "token.crt")}}})
    push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{reg.host}/python:3.12-slim",
         "--dest-creds", "lens:t0ken-pw")
    yield reg, tokens
    reg.stop()
    tokens.shutdown()


def test_bearer_token_with_credentials(token_registry, tmp_path, recipe_digest):
    reg, tokens = token_registry
    ref = f"{reg.host}/python:3.12-slim"
    insecure = ("--insecure-registry", reg.host)
    tokens.requests.clear()
    refused(tmp_path / "s0", ref, "EACCES", *insecure, says="answered HTTP 401")
    creds = credentials(tmp_path / "c.json", reg.host, "lens", "t0ken-pw")
    tokens.requests.clear()
    digest, _ = pulled(tmp_path / "s1", ref, *insecure, "--credentials", creds)
    assert digest == recipe_digest
    (req,) = tokens.requests
    assert req["query"]["service"] == [SERVICE]
    assert req["query"]["scope"] == ["repository:python:pull"]
    assert req["authorization"] == "Basic " + base64.b64encode(b"lens:t0ken-pw").decode()


# ---- a registry front for redirects and resumption ----

class Front(http.server.ThreadingHTTPServer):
    """Serves an OCI layout as a registry on 127.0.0.1 with a bearer challenge; blobs redirect to a second server
    on 127.0.0.2 (another host), which honours Range. Every request's headers are recorded."""

    def __init__(self, layout, host_ip, blob_host=None, auth=None, expire_on_first_blob=False, slow=False):
        self.layout, self.blob_host, self.requests, self.slow = layout, blob_host, [], slow
        self.auth = bool(blob_host) if auth is None else auth
        self.tokens_issued, self.valid_token, self.expire = 0, None, expire_on_first_blob
        super().__init__((host_ip, 0), FrontHandler)
        self.host = f"{host_ip}:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class FrontHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, dict(self.headers)))
        if self.path.startswith("/token"):
            srv.tokens_issued += 1
            srv.valid_token = "tok-123" if srv.tokens_issued == 1 else f"tok-{srv.tokens_issued}"
            return self.send(200, json.dumps({"access_token": srv.valid_token}).encode())
        challenge = [("WWW-Authenticate", f'Bearer realm="http://{srv.host}/token",service="front"')]
        if srv.auth and self.headers.get("Authorization") != f"Bearer {srv.valid_token}":
            return self.send(401, b"", challenge)
        if srv.expire and "/blobs/" in self.path:
            srv.expire, srv.valid_token = False, None  # the token expires in the middle of the pull
            return self.send(401, b"", challenge)
        parts = self.path.split("/")
        layout = srv.layout
        if "/manifests/" in self.path:
            index = json.loads(open(os.path.join(layout, "index.json")).read())
            digest = index["manifests"][0]["digest"]
            if parts[-1].startswith("sha256:"):
                digest = parts[-1]
            data = open(oci.blob_path(layout, digest), "rb").read()
            return self.send(200, data, [("Content-Type", oci.MT_MANIFEST)])
        if "/blobs/" in self.path:
            if srv.blob_host:
                return self.send(307, b"", [("Location", f"http://{srv.blob_host}{self.path}")])
            data = open(oci.blob_path(layout, parts[-1]), "rb").read()
            rng = self.headers.get("Range")
            if rng:
                start = int(rng.split("=")[1].split("-")[0])
                return self.send(206, data[start:], [("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")])
            if srv.slow:  # dribble the blob out, so concurrent pulls overlap
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(0, len(data), 16384):
                    self.wfile.write(data[i:i + 16384])
                    self.wfile.flush()
                    time.sleep(0.02)
                return
            return self.send(200, data)
        self.send(404)


def test_redirect_drops_authorization_and_download_resumes(tmp_path):
    if subprocess.run(["ip", "-brief", "addr", "show", "lo"], stdout=subprocess.PIPE, text=True).stdout.find(
            "127.0.0.1/8") < 0:
        pytest.fail("loopback has no 127.0.0.0/8 (127.0.0.2 is needed as a second host)")
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("data", os.urandom(300000))])
    layout = tmp_path / "layout"
    digests = oci.write_layout(layout, [layer])
    blobs = Front(str(layout), "127.0.0.2")
    front = Front(str(layout), "127.0.0.1", blob_host=blobs.host)
    try:
        store = tmp_path / "store"
        # an earlier, interrupted download left the first 100000 bytes of the layer
        os.makedirs(store / "layout/blobs/sha256")
        hexd = digests["layers"][0].split(":")[1]
        (store / "layout/blobs/sha256" / f"{hexd}.partial").write_bytes(layer.blob[:100000])
        digest, rootfs = pulled(store, f"{front.host}/app:1", "--insecure-registry", front.host)
        assert digest == digests["config"]
        assert open(os.path.join(rootfs, "data"), "rb").read() == tarfile.open(
            fileobj=__import__("io").BytesIO(layer.blob)).extractfile("data").read()
        # the registry got the token; the other host never did
        assert any(h.get("Authorization") == "Bearer tok-123" for p, h in front.requests if "/blobs/" in p)
        assert blobs.requests and all("Authorization" not in h for _, h in blobs.requests)
        ranges = [h.get("Range") for p, h in blobs.requests if hexd in p]
        assert ranges == ["bytes=100000-"]
        assert not os.path.exists(store / "layout/blobs/sha256" / f"{hexd}.partial")
    finally:
        front.shutdown()
        blobs.shutdown()


def test_tampered_blob_refused(tmp_path):
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("x", b"y" * 1000)])
    layout = tmp_path / "layout"
    digests = oci.write_layout(layout, [layer])
    p = oci.blob_path(layout, digests["layers"][0])
    data = bytearray(open(p, "rb").read())
    data[-5] ^= 0xFF
    open(p, "wb").write(bytes(data))
    front = Front(str(layout), "127.0.0.1")
    try:
        store = tmp_path / "store"
        refused(store, f"{front.host}/app:1", "EBADMSG", "--insecure-registry", front.host,
                says="downloaded content is")
        assert not [n for n in os.listdir(store / "layout/blobs/sha256") if n.startswith(digests["layers"][0][7:])]
        assert os.listdir(store / "images") == []
    finally:
        front.shutdown()


def test_gc_removes_unwanted_pulled_blobs(plain, tmp_path):
    store = tmp_path / "store"
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("gc", b"me")])
    lay = tmp_path / "gcimg"
    digests = oci.write_layout(lay, [layer])
    push(f"oci:{lay}:latest", f"{plain.host}/gcme:1")
    pulled(store, f"{plain.host}/gcme:1", "--insecure-registry", plain.host)
    blobs = store / "layout/blobs/sha256"
    names = sorted(os.listdir(blobs))
    assert digests["layers"][0][7:] in names and len(names) == 3  # manifest, config, layer
    # what a pull killed between writing a blob and renaming it leaves: an old one and one being written now
    abandoned, fresh = f".{digests['layers'][0][7:]}.1234-1234-1", f".{digests['layers'][0][7:]}.1235-1235-2"
    (blobs / abandoned).write_bytes(b"half a blob")
    (blobs / fresh).write_bytes(b"half a blob")
    old = time.time() - 3600
    for n in names + [abandoned]:
        os.utime(blobs / n, (old, old))
    # and an import or tag killed between making its temporary name link and renaming it
    links = store / "names"
    os.symlink("../images/" + "0" * 64, links / ".tmp-1234-1234-1")
    os.symlink("../images/" + "0" * 64, links / ".tmp-1235-1235-2")
    os.utime(links / ".tmp-1234-1234-1", (old, old), follow_symlinks=False)
    tool = [TOOL, "--root", str(store)]
    assert subprocess.run(tool + ["pin", f"{plain.host}/gcme:1"]).returncode == 0
    subprocess.run(tool + ["gc", "--older-than", "0"], check=True, stdout=subprocess.DEVNULL)
    # a pinned image keeps its blobs; the abandoned temporary blob and name link go, the fresh ones stay
    assert sorted(os.listdir(blobs)) == sorted(names + [fresh])
    os.unlink(blobs / fresh)
    assert [n for n in os.listdir(links) if n.startswith(".")] == [".tmp-1235-1235-2"]
    os.unlink(links / ".tmp-1235-1235-2")
    assert subprocess.run(tool + ["unpin", f"{plain.host}/gcme:1"]).returncode == 0
    out = subprocess.run(tool + ["gc", "--older-than", "0"], check=True, stdout=subprocess.PIPE, text=True).stdout
    assert out.strip() == "removed 1 image(s)"
    assert os.listdir(blobs) == []


def test_oversized_or_complete_partial(tmp_path):
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("p", os.urandom(50000))])
    layout = tmp_path / "layout"
    digests = oci.write_layout(layout, [layer])
    front = Front(str(layout), "127.0.0.1")
    hexd = digests["layers"][0].split(":")[1]
    try:
        # longer than the blob: thrown away and downloaded whole
        s1 = tmp_path / "s1"
        os.makedirs(s1 / "layout/blobs/sha256")
        (s1 / "layout/blobs/sha256" / f"{hexd}.partial").write_bytes(layer.blob + b"junk")
        pulled(s1, f"{front.host}/app:1", "--insecure-registry", front.host)
        blob_reqs = [h for p, h in front.requests if hexd in p]
        assert len(blob_reqs) == 1 and "Range" not in blob_reqs[0]
        # complete and correct: used without any request
        front.requests.clear()
        s2 = tmp_path / "s2"
        os.makedirs(s2 / "layout/blobs/sha256")
        (s2 / "layout/blobs/sha256" / f"{hexd}.partial").write_bytes(layer.blob)
        pulled(s2, f"{front.host}/app:1", "--insecure-registry", front.host)
        assert not [p for p, h in front.requests if hexd in p]
    finally:
        front.shutdown()


def test_token_expiring_during_blob_download(tmp_path):
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("e", b"xp")])
    layout = tmp_path / "layout"
    digests = oci.write_layout(layout, [layer])
    front = Front(str(layout), "127.0.0.1", auth=True, expire_on_first_blob=True)
    try:
        digest, _ = pulled(tmp_path / "s", f"{front.host}/app:1", "--insecure-registry", front.host, "--parallel", "1")
        assert digest == digests["config"]
        assert front.tokens_issued == 2
    finally:
        front.shutdown()


def test_concurrent_pulls_of_the_same_image(tmp_path):
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("c", os.urandom(400000))], compression=None)
    layout = tmp_path / "layout"
    digests = oci.write_layout(layout, [layer])
    front = Front(str(layout), "127.0.0.1", slow=True)
    try:
        store = tmp_path / "store"
        procs = [subprocess.Popen([TOOL, "--root", str(store), "pull", f"{front.host}/app:1", "--insecure-registry",
                                   front.host], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, errs) in zip(procs, outs):
            assert p.returncode == 0, errs
            assert out.split()[0] == digests["config"]
        hexd = digests["layers"][0].split(":")[1]
        assert len([p for p, h in front.requests if hexd in p]) == 1  # downloaded once, waited for by the other
    finally:
        front.shutdown()


def test_sandbox_from_pulled_image(plain, tmp_path, recipe_digest):
    """The issue's end-to-end check: an image pulled from the registry runs python3 and bash in a real sandbox
    (lensbox-runner), from the very rootfs an import of the recipe's archive gives."""
    runner = os.path.join(os.environ.get("LENSBOX_BUILD_DIR", ""), "runner", "lensbox-runner")
    if not os.access(runner, os.X_OK):
        pytest.fail(f"{runner} is not built (cmake --build the lensbox-runner target)")
    store = tmp_path / "store"
    digest, rootfs = pulled(store, f"{plain.host}/python:3.12-slim", "--insecure-registry", plain.host)
    r = subprocess.run([TOOL, "--root", str(store), "import", default_image_archive()], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0 and r.stdout.split() == [digest, rootfs] and digest == recipe_digest
    source = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    r = subprocess.run([runner, "--rootfs", rootfs, "--storage", str(tmp_path / "storage"), "--policy",
                        os.path.join(source, "policy"), "--run-dir", str(tmp_path / "run"), "--name",
                        f"imgpull{os.getpid()}", "--", "bash", "-c", "python3 -c 'print(6*7)'; echo $0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["exit_code"] == 0 and res["stdout"] == "42\nbash\n", res
