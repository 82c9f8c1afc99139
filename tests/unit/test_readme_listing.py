"""Every command README.md shows is run by tests/integration/test_readme_commands.py or listed with why
it is not (tests/support/readme_commands.py); a listed one the README no longer shows is stale."""

from __future__ import annotations

from tests.support.readme_commands import NOT_RUN, README, RUN, is_locust_run, readme_commands


def test_every_readme_command_is_run_or_listed():
    shown = readme_commands(README.read_text())
    unaccounted = [c for c in shown if not is_locust_run(c) and c not in RUN and c not in NOT_RUN]
    assert unaccounted == [], f"README commands neither run nor listed in NOT_RUN (with a reason): {unaccounted}"
    stale = [c for c in [*RUN, *NOT_RUN] if c not in shown]
    assert stale == [], f"listed commands the README no longer shows: {stale}"
    assert set(RUN).isdisjoint(NOT_RUN)
