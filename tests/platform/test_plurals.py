"""Counts read right when they are one: ``1 record``, ``1 event/s``, never ``1 records``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventplatform.spark_projections.replay import ReplayRange, ReplaySummary

if TYPE_CHECKING:
    from conftest import Platform

WAIT_S = "20"


def test_one_record_produced_and_consumed(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "1")

    produced = platform.ok("produce", unique_name, input=b"only\n")
    consumed = platform.ok(
        "consume", unique_name, "--from-beginning", "--max-messages", "1", "--timeout", WAIT_S
    )

    assert f"produced 1 record to {unique_name}" in produced.stderr
    assert "consumed 1 record\n" in consumed.stderr


def test_a_replay_of_one_event_at_one_event_a_second() -> None:
    summary = ReplaySummary(
        "shop.totals",
        "rebuild",
        [ReplayRange("orders", 0, 4, 5, 0, 5)],
        ["totals"],
        events_read=1,
        events_applied=1,
        rows_written=1,
        caught_up=1,
        seconds=1.0,
    )

    lines = summary.lines()

    assert "  orders/0: offsets 4..5 (1 event; log 0..5)" in lines
    assert "caught up with the streaming runner: 1 more event" in lines
    assert lines[-1].endswith(", 1.0 s, 1 event/s")
    many = ReplaySummary("shop.totals", "rebuild", [], ["totals"], events_read=1200, seconds=1.0)
    assert many.lines()[-1].endswith(", 1,200 events/s")
