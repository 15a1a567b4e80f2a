"""Chaos, short: the services' worker and supervisor SIGKILLed 5 times each under lensboxd (networking on, in the
sealed world): each replaced and serving again within 1 s, no crash loop reported for kills 1 s apart, nothing left
when lensboxd itself is killed (tests/chaos/chaos.py, part_services)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_services_killed_are_replaced_within_a_second():
    p = chaos.part_services(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries == 2 * chaos.SHORT.service_kills
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks
