"""The send-lag profile (`python -m bench.lag_profile`): the engine's six times per send split into
the pacer's lateness, the hand-over to the sender, the spin's overrun and the write; a line that
another process's output ran into is left out, not misread."""

from __future__ import annotations

from bench.lag_profile import profile


def test_the_parts_of_each_send_come_from_its_six_times() -> None:
    # due at 1,000,000 ns, meant to be let go 100 µs early; let go 20 µs late, had 30 µs later,
    # the spin ended on the instant, the first byte written 90 µs after the call began
    lines = "inferload engine lag: 1000000 900000 920000 950000 1000000 1090000\n"
    parts = profile(lines)
    assert parts["pacer_late"]["p50"] == 0.02 and parts["wake"]["p50"] == 0.03
    assert parts["spin_late"]["p50"] == 0.0 and parts["write"]["p50"] == 0.09
    assert parts["send_lag"]["p50"] == 0.09 and parts["send_lag"]["n"] == 1


def test_a_line_cut_by_other_output_is_left_out() -> None:
    stream = (
        "[2026-12-02 08:00:00] locust: starting\n"
        "inferload engine lag: 1000000 900000 920000 950000 1000000 1090000\n"
        "inferload engine lag: 2000000 1900000 1900000 1950000 2000000 20[2026-12-02 08:00:01] noise\n"
        "inferload engine lag: 3000000 2900000 3400000 3400000 3400000 3500000\n"
    )
    parts = profile(stream)
    assert parts["send_lag"]["n"] == 2
    assert parts["send_lag"]["max"] == 0.5 and parts["pacer_late"]["max"] == 0.5
