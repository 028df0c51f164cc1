"""The SLO plots' value axis: round ticks, and the target among them at its own value."""

from __future__ import annotations

from infertop.ui.widgets.slo import value_ticks


def test_the_target_is_a_tick_of_its_own_and_its_neighbours_make_room():
    ticks, labels = value_ticks(-0.1, 2.2, 2.0)
    assert (ticks, labels) == ([0.0, 1.0, 2.0], ["0", "1", "2"])
    ticks, labels = value_ticks(0.0, 16.0, 14.4)  # 15 would sit on the target's row: it gives way
    assert labels == ["0", "5", "10", "14.4"]


def test_a_narrow_range_gets_round_steps_not_from_zero():
    assert value_ticks(80.0, 95.0, 90.0)[1] == ["80", "85", "90", "95"]


def test_a_flat_or_empty_range_is_no_tick_or_the_target_only():
    assert value_ticks(1.0, 1.0) == ([], [])
    assert value_ticks(3.0, 3.0, 3.0) == ([3.0], ["3"])
