"""Chaos, short: 40 clients for 30 s on 10 sandboxes (health, listings, uploads, downloads, runs): only successes or
documented overload answers with Retry-After, acknowledged uploads read back, lensboxd's fds and RSS flat, nothing
leaked (tests/chaos/chaos.py, part_load)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_load_gives_only_documented_answers_and_leaks_nothing():
    p = chaos.part_load(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries > 100, p.tries
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks
