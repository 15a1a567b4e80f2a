"""A spec change this host cannot serve is refused before anything is stopped or deleted (issue 16, item 6): a network
tier with `networking = off`, an image that is not here with `pull_missing_images = off`, limits out of range. Each
through `PUT /v1/sandboxes/{name}` and through a run's `sandbox` field, on a running sandbox holding an uploaded
file: the documented error, then the sandbox is still running (not restarted), with the same host uid and its file,
and runs. A new sandbox with such a spec is not recorded either. The same change on a host that can serve it
(networking on, in a sealed network namespace) does recreate the sandbox: the refusals come from the host, not from
the change."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import sealed  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

# The control test runs lensboxd with networking on: a sealed namespace keeps it off the machine's real network.
sealed.enter()

CAUSES = [
    # (what changes, the spec, status, code, a phrase the message must hold)
    ("network", {"network": "web"}, 503, "host_unavailable", "networking = off"),
    ("image", {"image": "python:9.9"}, 503, "image_unavailable", "python:9.9"),
    ("limits", {"network": "web", "memory": "1Ti"}, 422, "out_of_range", "`memory` must be"),
    ("limits-cpu", {"image": "python:9.9", "cpu": 65}, 422, "out_of_range", "`cpu` must be"),
    ("limits-disk", {"network": "web", "disk": "2Ti"}, 422, "out_of_range", "`disk` must be"),
]


@pytest.fixture(scope="module")
def d():
    # the Daemon's test defaults are the host this item is about: networking off, no pulls
    with Daemon() as daemon:
        assert daemon.settings["networking"] == "off" and daemon.settings["pull_missing_images"] == "off"
        yield daemon


def sandbox(d, n):
    status, body = d.request("GET", f"/v1/sandboxes/{n}")
    assert status == 200, body
    return body


def running_with_a_file(d, n):
    status, _, _ = d.raw("PUT", f"/v1/sandboxes/{n}/files/keep/notes.txt", b"remember")
    assert status == 201
    assert d.ok_run(n, "print(open('keep/notes.txt').read())")["stdout"] == "remember\n"
    sb = sandbox(d, n)
    assert sb["state"] == "running"
    return sb


def assert_untouched(d, n, before):
    after = sandbox(d, n)
    assert after["state"] == "running", "the refused change stopped the sandbox"
    assert (after["host_uid"], after["spec"], after["created_at"], after["runs"]) == \
        (before["host_uid"], before["spec"], before["created_at"], before["runs"])
    status, _, data = d.raw("GET", f"/v1/sandboxes/{n}/files/keep/notes.txt")
    assert (status, data) == (200, b"remember")
    r = d.ok_run(n, "print(open('keep/notes.txt').read())")
    assert r["stdout"] == "remember\n"
    assert (r["sandbox_started"], r["sandbox_created"], r["recreated"]) == (False, False, None)


def assert_error(status, body, want_status, code, phrase):
    assert status == want_status and body["error"]["code"] == code, (status, body)
    assert phrase in body["error"]["message"], body


@pytest.mark.parametrize("cause,spec,want,code,phrase", CAUSES, ids=[c[0] for c in CAUSES])
def test_refused_put_keeps_the_sandbox_and_its_files(d, cause, spec, want, code, phrase):
    n = d.name("put-" + cause)
    before = running_with_a_file(d, n)
    status, body = d.request("PUT", f"/v1/sandboxes/{n}", spec)
    assert_error(status, body, want, code, phrase)
    assert_untouched(d, n, before)


@pytest.mark.parametrize("cause,spec,want,code,phrase", CAUSES, ids=[c[0] for c in CAUSES])
def test_refused_run_spec_keeps_the_sandbox_and_its_files(d, cause, spec, want, code, phrase):
    n = d.name("run-" + cause)
    before = running_with_a_file(d, n)
    status, body = d.run(n, "print('ran')", sandbox=spec)
    assert_error(status, body, want, code, phrase)
    assert_untouched(d, n, before)


@pytest.mark.parametrize("cause,spec,want,code,phrase", CAUSES, ids=[c[0] for c in CAUSES])
def test_a_new_sandbox_with_a_spec_the_host_cannot_serve_is_not_recorded(d, cause, spec, want, code, phrase):
    n = d.name("new-" + cause)
    status, body = d.request("PUT", f"/v1/sandboxes/{n}", spec)
    assert_error(status, body, want, code, phrase)
    status, body = d.run(n, "print('ran')", sandbox=spec)
    assert_error(status, body, want, code, phrase)
    assert d.request("GET", f"/v1/sandboxes/{n}")[0] == 404


def test_a_stopped_sandbox_keeps_its_files_too(d):
    n = d.name("stopped")
    running_with_a_file(d, n)
    assert d.request("POST", f"/v1/sandboxes/{n}/stop")[1] == {"stopped": True}
    status, body = d.request("PUT", f"/v1/sandboxes/{n}", {"network": "packages"})
    assert_error(status, body, 503, "host_unavailable", "networking = off")
    assert sandbox(d, n)["spec"]["network"] == "off"
    r = d.ok_run(n, "print(open('keep/notes.txt').read())")
    assert r["stdout"] == "remember\n" and r["recreated"] is None


def test_the_same_change_on_a_host_that_serves_it_recreates():
    with Daemon(settings={"networking": "on"}) as on:
        n = on.name("served")
        running_with_a_file(on, n)
        status, body = on.request("PUT", f"/v1/sandboxes/{n}", {"network": "web"})
        assert status == 200 and body["recreated"] == "the network changed from off to web", body
        assert on.request("GET", f"/v1/sandboxes/{n}/files/keep/notes.txt")[0] == 404
