"""A keep's reason never shows numbers for a metric that was not judged (issue 19, item 5).

A lossless move was kept on alltoall after two runs while all_reduce's two runs (127.5 and 90.5
GB/s) lay too far apart to judge; the reason read "all_reduce +0.0% (bounds -100.0%..+inf%) not
decisive alone", a measurement nobody made. These tests fail on that code.
"""

from __future__ import annotations

from fabtune.tune import loop
from fabtune.tune.stats import decide

BASE = [120.0, 121.0, 119.5, 120.4, 120.8, 119.9, 120.2, 120.6]


def test_two_runs_too_far_apart_are_not_judged_and_say_why() -> None:
    split = decide(BASE, [127.5, 90.5])
    assert (split.verdict, split.reason) == ("continue", "runs too far apart to judge yet")
    assert loop._undecided("all_reduce", split) == "all_reduce not judged (runs too far apart to judge yet)"
    early = decide(BASE, [127.5])
    assert loop._undecided("all_reduce", early) == "all_reduce not judged (too few runs yet)"


def test_a_judged_metric_beside_the_decisive_one_shows_its_estimate_and_bounds() -> None:
    judged = decide(BASE, [121.0, 120.0, 121.5])
    text = loop._undecided("all_reduce", judged)
    assert text.startswith("all_reduce +") and "(bounds " in text and "inf" not in text
    assert text.endswith("not decisive alone")
