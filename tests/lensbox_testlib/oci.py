"""Builds OCI image layouts and docker save archives for tests, hostile ones included. Standard library only.

    layer = tar_layer([f("etc/hello", b"hi"), sym("lib", "usr/lib"), wh("usr/.wh.old")], compression="gzip")
    digests = write_layout(tmp_path / "img", [layer])

tar_layer() returns a Layer (blob bytes, media type, diff_id of the uncompressed tar); write_layout() writes
oci-layout, index.json and blobs with correct digests, which a test may then tamper with. Entry helpers take raw
names, so "../x", "/abs" and "." are written exactly as given.
"""

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from dataclasses import dataclass

OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    None: "application/vnd.oci.image.layer.v1.tar",
}


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def _info(name, type_, mode=0o644, uid=0, gid=0, mtime=1700000000, linkname="", pax=None):
    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.mtime = mtime
    ti.linkname = linkname
    if pax:
        ti.pax_headers = dict(pax)
    return ti


def f(name, data=b"", mode=0o644, uid=0, gid=0, pax=None, mtime=1700000000):
    ti = _info(name, tarfile.REGTYPE, mode, uid, gid, mtime, pax=pax)
    ti.size = len(data)
    return ti, data


def d(name, mode=0o755, uid=0, gid=0):
    return _info(name, tarfile.DIRTYPE, mode, uid, gid), None


def sym(name, target, uid=0, gid=0):
    return _info(name, tarfile.SYMTYPE, 0o777, uid, gid, linkname=target), None


def hard(name, target):
    return _info(name, tarfile.LNKTYPE, 0o644, linkname=target), None


def dev(name, major=1, minor=3):
    ti = _info(name, tarfile.CHRTYPE, 0o666)
    ti.devmajor, ti.devminor = major, minor
    return ti, None


def fifo(name):
    return _info(name, tarfile.FIFOTYPE, 0o644), None


def wh(name):
    """A whiteout entry: name is the full entry path (e.g. "usr/.wh.old" or "dir/.wh..wh..opq")."""
    return f(name)


@dataclass
class Layer:
    blob: bytes
    media_type: str
    diff_id: str  # hex of the uncompressed tar


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for ti, data in entries:
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def compress(raw, compression):
    if compression == "gzip":
        return gzip.compress(raw, mtime=0)
    if compression == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    return raw


def tar_layer(entries, compression="gzip"):
    raw = tar_bytes(entries)
    return Layer(compress(raw, compression), MT_LAYER[compression], sha256(raw))


def raw_layer(raw, compression="gzip"):
    return Layer(compress(raw, compression), MT_LAYER[compression], sha256(raw))


def put_blob(layout, data):
    h = sha256(data)
    p = os.path.join(layout, "blobs", "sha256", h)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as fh:
        fh.write(data)
    return {"digest": "sha256:" + h, "size": len(data)}


def image_config(layers, arch=OCI_ARCH, env=None, workdir="/sandbox"):
    return {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + l.diff_id for l in layers]},
    }


def write_manifest(layout, layers, config=None, arch=OCI_ARCH):
    """Writes config, layers and the manifest blobs; returns the manifest descriptor (without platform)."""
    cfg = json.dumps(config or image_config(layers, arch=arch)).encode()
    cdesc = dict(mediaType=MT_CONFIG, **put_blob(layout, cfg))
    ldescs = [dict(mediaType=l.media_type, **put_blob(layout, l.blob)) for l in layers]
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": cdesc, "layers": ldescs}).encode()
    return dict(mediaType=MT_MANIFEST, **put_blob(layout, manifest)), cdesc


def write_index(layout, manifests):
    os.makedirs(layout, exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as fh:
        json.dump({"imageLayoutVersion": "1.0.0"}, fh)
    with open(os.path.join(layout, "index.json"), "w") as fh:
        json.dump({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests}, fh)


def write_layout(layout, layers, config=None, ref_name="latest"):
    """A single-image OCI layout; returns {"manifest": digest, "config": digest, "layers": [digests]}."""
    layout = str(layout)
    os.makedirs(layout, exist_ok=True)
    mdesc, cdesc = write_manifest(layout, layers, config)
    entry = dict(mdesc, annotations={"org.opencontainers.image.ref.name": ref_name})
    write_index(layout, [entry])
    return {"manifest": mdesc["digest"], "config": cdesc["digest"], "layers": ["sha256:" + sha256(l.blob) for l in layers]}


def blob_path(layout, digest):
    return os.path.join(str(layout), "blobs", "sha256", digest.split(":")[1])


def tar_dir(src, dest):
    """Tars a layout directory (as `skopeo copy … oci-archive:` would)."""
    with tarfile.open(dest, "w") as t:
        for name in sorted(os.listdir(src)):
            t.add(os.path.join(src, name), arcname=name)
    return dest
