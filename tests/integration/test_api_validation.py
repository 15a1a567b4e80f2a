"""lensboxd refuses bad requests with the exact status and error code of docs/api.md, and keeps serving.

Malformed JSON, wrong types, unknown and repeated fields, out-of-range values, bad names (/, .., NUL, 200
characters, upper case), path attacks, a 2 MB source, bodies larger than any limit, routes and methods that do not
exist. None of these needs a sandbox to start; each is checked through http.client, several through curl too.
"""
import json
import os
import socket
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def err(d, method, path, body=None, headers=None):
    status, b = d.request(method, path, body, headers)
    assert isinstance(b, dict) and set(b) == {"error"}, (status, b)
    assert set(b["error"]) == {"code", "message"}, b
    assert b["error"]["message"].strip(), b
    return status, b["error"]["code"]


def test_health_answers_with_host_facts(d):
    status, b = d.request("GET", "/v1/health")
    assert status == 200
    assert b["version"] == "0.1.0"
    assert isinstance(b["can_run"], bool)
    assert b["can_run"] is (b["why_not"] is None)
    for k in ("kernel", "landlock_abi", "cgroup", "seccomp", "nftables", "user_namespaces"):
        assert k in b["host"], k
    assert b["host"]["kernel"] == os.uname().release
    assert b["sandboxes"] == {"running": 0, "stopped": 0, "max_running": 16}
    assert b["runs_in_flight"] == 0
    assert b["default_image"]["name"] == "python:3.12-slim" and b["default_image"]["available"] is True
    assert b["default_image"]["digest"].startswith("sha256:")


def test_health_through_curl(d):
    code, body = d.curl("http://lensbox/v1/health")
    assert code == 200
    assert json.loads(body)["version"] == "0.1.0"


def test_socket_is_root_group_0660_in_a_private_directory(d):
    st = os.stat(d.socket)
    assert oct(st.st_mode & 0o7777) == "0o660"
    assert st.st_uid == 0
    parent = os.stat(os.path.dirname(d.socket))
    assert parent.st_mode & 0o007 == 0


@pytest.mark.parametrize("body,code", [
    (b"{", "invalid_json"),
    (b"[1,2]", "invalid_json"),
    (b"\"python\"", "invalid_json"),
    (b"{\"language\": \"python\", \"source\": \"1\"} trailing", "invalid_json"),
    (b"{\"language\": \"python\", \"source\": \"a\x00b\"}", "invalid_json"),
    (b"{\"language\": \"python\", \"source\": \"\xff\xfe\"}", "invalid_json"),
])
def test_malformed_json_is_400(d, body, code):
    assert err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", body, {"Content-Type": "application/json"}) == (400, code)


@pytest.mark.parametrize("body,code", [
    ({"language": 1, "source": "x"}, "wrong_type"),
    ({"language": "python", "source": ["x"]}, "wrong_type"),
    ({"language": "python", "source": "x", "timeout_seconds": "60"}, "wrong_type"),
    ({"language": "python", "source": "x", "timeout_seconds": 1.5}, "wrong_type"),
    ({"language": "python", "source": "x", "output_limit": True}, "wrong_type"),
    ({"language": "python", "source": "x", "sandbox": "big"}, "wrong_type"),
    ({"language": "python", "source": "x", "sandbox": {"idle_minutes": "15"}}, "wrong_type"),
    ({"language": "python", "source": "x", "color": "red"}, "unknown_field"),
    ({"language": "python", "source": "x", "sandbox": {"gpu": 1}}, "unknown_field"),
    ({"language": "python"}, "missing_field"),
])
def test_wrong_types_and_unknown_fields_are_400(d, body, code):
    assert err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", body) == (400, code)


def test_nul_character_in_a_string_is_422(d):
    # yajl keeps strings as C strings: a U+0000 would silently cut the source, so it is refused instead
    assert err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", {"language": "python", "source": "print(1)\x00"}) == \
        (422, "invalid_value")


def test_repeated_field_is_400(d):
    raw = b'{"language": "python", "language": "bash", "source": "x"}'
    assert err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", raw) == (400, "duplicate_field")


@pytest.mark.parametrize("body", [
    {"language": "ruby", "source": "x"},
    {"language": "python", "source": "x", "timeout_seconds": 0},
    {"language": "python", "source": "x", "timeout_seconds": 601},
    {"language": "python", "source": "x", "timeout_seconds": -5},
    {"language": "python", "source": "x", "output_limit": 0},
    {"language": "python", "source": "x", "output_limit": 1000001},
    {"language": "python", "source": "x", "sandbox": {"cpu": 0.05}},
    {"language": "python", "source": "x", "sandbox": {"cpu": "65"}},
    {"language": "python", "source": "x", "sandbox": {"cpu": "lots"}},
    {"language": "python", "source": "x", "sandbox": {"memory": "32Mi"}},
    {"language": "python", "source": "x", "sandbox": {"memory": "65Gi"}},
    {"language": "python", "source": "x", "sandbox": {"memory": "-1"}},
    {"language": "python", "source": "x", "sandbox": {"idle_minutes": 0}},
    {"language": "python", "source": "x", "sandbox": {"idle_minutes": 1441}},
    {"language": "python", "source": "x", "sandbox": {"keep_hours": 721}},
    {"language": "python", "source": "x", "sandbox": {"network": "everything"}},
    {"language": "python", "source": "x", "sandbox": {"image": "../../etc"}},
    {"language": "python", "source": "x", "sandbox": {"image": ""}},
])
def test_out_of_range_values_are_422(d, body):
    status, code = err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", body)
    assert status == 422 and code in ("out_of_range", "invalid_value"), (status, code)


def test_put_spec_is_validated_the_same_way(d):
    assert err(d, "PUT", f"/v1/sandboxes/{d.name('v')}", {"memory": "1Ti"}) == (422, "out_of_range")
    assert err(d, "PUT", f"/v1/sandboxes/{d.name('v')}", {"cpu": [1]}) == (400, "wrong_type")
    assert err(d, "PUT", f"/v1/sandboxes/{d.name('v')}", {"name": "x"}) == (400, "unknown_field")
    # nothing was created by the refused requests
    assert d.request("GET", f"/v1/sandboxes/{d.name('v')}")[0] == 404


@pytest.mark.parametrize("raw_name", [
    "a%2Fb", "..", "%2E%2E", "a%00b", "x" * 200, "Upper", "-lead", ".hidden", "a%20b", "%ff", "a%2", "a%zz",
])
def test_bad_names_are_400_invalid_name(d, raw_name):
    assert err(d, "GET", f"/v1/sandboxes/{raw_name}") == (400, "invalid_name")
    assert err(d, "POST", f"/v1/sandboxes/{raw_name}/runs", {"language": "python", "source": "1"}) == \
        (400, "invalid_name")


def test_names_at_the_limits(d):
    assert d.request("GET", "/v1/sandboxes/" + "a" * 63)[0] == 404
    assert err(d, "GET", "/v1/sandboxes/" + "a" * 64) == (400, "invalid_name")


def test_name_with_a_slash_cannot_be_routed(d):
    assert err(d, "GET", "/v1/sandboxes/a/b") == (404, "not_found")


@pytest.mark.parametrize("path", ["..%2Fetc%2Fshadow", "a/../../b", "%2Fetc%2Fshadow", "a//b", "./a", "a/", "a%00b",
                                  ".lensbox/x", "x" * 300])
def test_path_attacks_are_400_invalid_path(d, path):
    status, code = err(d, "PUT", f"/v1/sandboxes/{d.name('v')}/files/{path}", b"x")
    assert (status, code) == (400, "invalid_path"), path
    status, code = err(d, "GET", f"/v1/sandboxes/{d.name('v')}/files/{path}")
    assert (status, code) == (400, "invalid_path"), path


def test_two_megabyte_source_is_413(d):
    body = {"language": "python", "source": "#" * (2 << 20)}
    assert err(d, "POST", f"/v1/sandboxes/{d.name('v')}/runs", body) == (413, "source_too_large")


def test_body_over_every_limit_is_413_before_it_is_read(d):
    # Content-Length says 100 MB; lensboxd answers without reading it.
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(d.socket)
    s.sendall(b"POST /v1/sandboxes/" + d.name("v").encode() + b"/runs HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n" + b"{" * 1000)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    assert data.startswith(b"HTTP/1.1 413"), data[:200]


def test_chunked_body_over_the_limit_is_413(d):
    # No Content-Length: the body grows past the 64 KiB a PUT spec may have.
    def chunks():
        for _ in range(200):
            yield b" " * 1024
    status, b = d.request("PUT", f"/v1/sandboxes/{d.name('v')}", chunks(),
                          {"Transfer-Encoding": "chunked", "Content-Type": "application/json"})
    assert status == 413 and b["error"]["code"] == "body_too_large"


def test_file_over_25_mib_is_413(d, tmp_path):
    # curl sends "Expect: 100-continue" for a large body and reads the early 413 instead of the whole upload.
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate((25 << 20) + 1)
    code, body = d.curl("-X", "PUT", "--data-binary", f"@{big}",
                        f"http://lensbox/v1/sandboxes/{d.name('big')}/files/big.bin")
    assert code == 413
    assert json.loads(body)["error"]["code"] == "file_too_large"
    # refused before anything happened: the sandbox was not even created
    assert d.request("GET", f"/v1/sandboxes/{d.name('big')}")[0] == 404


def test_unknown_routes_and_methods(d):
    assert err(d, "GET", "/v2/health") == (404, "not_found")
    assert err(d, "GET", "/") == (404, "not_found")
    assert err(d, "POST", "/v1/health") == (405, "method_not_allowed")
    assert err(d, "DELETE", "/v1/sandboxes") == (405, "method_not_allowed")
    assert err(d, "GET", f"/v1/sandboxes/{d.name('v')}/runs") == (405, "method_not_allowed")
    assert err(d, "PATCH", f"/v1/sandboxes/{d.name('v')}") == (405, "method_not_allowed")


def test_unknown_sandbox_is_404(d):
    n = d.name("nobody")
    assert err(d, "GET", f"/v1/sandboxes/{n}") == (404, "sandbox_not_found")
    assert err(d, "POST", f"/v1/sandboxes/{n}/stop") == (404, "sandbox_not_found")
    assert err(d, "DELETE", f"/v1/sandboxes/{n}") == (404, "sandbox_not_found")
    assert err(d, "GET", f"/v1/sandboxes/{n}/files") == (404, "sandbox_not_found")
    assert err(d, "GET", f"/v1/sandboxes/{n}/files/a.txt") == (404, "sandbox_not_found")
    assert err(d, "GET", "/v1/runs/01aaaaaaaaaaaaaaaaaaaaaaaa") == (404, "run_not_found")


def test_runs_query_is_validated(d):
    assert err(d, "GET", "/v1/runs?limit=0") == (422, "out_of_range")
    assert err(d, "GET", "/v1/runs?limit=1001") == (422, "out_of_range")
    assert err(d, "GET", "/v1/runs?limit=ten") == (422, "out_of_range")
    assert err(d, "GET", "/v1/runs?sandbox=..%2Fx") == (400, "invalid_name")
    assert err(d, "GET", "/v1/runs?sandbox=a%00") == (400, "invalid_query")
    status, b = d.request("GET", "/v1/runs?limit=5")
    assert status == 200 and b == {"runs": []}


def test_daemon_survives_all_of_it(d):
    status, b = d.request("GET", "/v1/health")
    assert status == 200
    assert d.proc.poll() is None
    code, body = d.curl("http://lensbox/metrics")
    assert code == 200
    text = body.decode()
    assert 'lensbox_api_requests_total{status="400"}' in text
    assert 'lensbox_api_requests_total{status="413"}' in text
    assert d.leaks() == []


def test_health_says_when_the_default_image_is_missing(tmp_path):
    with Daemon(images_dir=str(tmp_path / "empty-store")) as d:
        status, b = d.request("GET", "/v1/health")
        assert status == 200
        assert b["default_image"]["available"] is False and b["default_image"]["digest"] is None
        assert "lensbox image pull python:3.12-slim" in b["default_image"]["why_not"]
        assert "lensbox image import ARCHIVE --name python:3.12-slim" in b["default_image"]["why_not"]
        status, r = d.run(d.name("x"), "print(1)")
        assert status == 503 and r["error"]["code"] == "image_unavailable"
        assert d.request("GET", f"/v1/sandboxes/{d.name('x')}")[0] == 404
