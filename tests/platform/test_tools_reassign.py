"""Reassignment plans and replica lists as `platform topics reassign` reads them."""

from __future__ import annotations

import pytest

from eventplatform.tools.errors import InvalidInputError
from eventplatform.tools.reassign import Target, parse_plan, parse_replicas


def test_a_kafka_plan_reads_in_order_and_log_dirs_are_ignored() -> None:
    plan = """{"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [3, 1, 2], "log_dirs": ["any", "any", "any"]},
        {"topic": "u", "partition": 4, "replicas": [2]}]}"""
    assert parse_plan(plan) == [Target("t", 0, (3, 1, 2)), Target("u", 4, (2,))]


def test_a_cancel_plan_needs_no_replicas() -> None:
    plan = '{"partitions": [{"topic": "t", "partition": 0}]}'
    assert parse_plan(plan, require_replicas=False) == [Target("t", 0)]
    with pytest.raises(InvalidInputError, match='"replicas" must be a list'):
        parse_plan(plan)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("[1, 2]", '"partitions" list'),
        ('{"partitions": [7]}', "plan entry 0 is not an object"),
        ('{"partitions": [{"topic": "", "partition": 0, "replicas": [1]}]}', '"topic"'),
        ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', '"partition"'),
        ('{"partitions": [{"topic": "t", "partition": true, "replicas": [1]}]}', '"partition"'),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "no replicas"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "twice"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]}', "broker ids"),
    ],
)
def test_a_bad_plan_names_its_fault(plan: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_plan(plan)


def test_replica_lists() -> None:
    assert parse_replicas("3,1,2") == (3, 1, 2)
    for bad, message in (("", "broker ids"), ("1,,2", "broker ids"), ("2,2", "twice")):
        with pytest.raises(InvalidInputError, match=message):
            parse_replicas(bad)
