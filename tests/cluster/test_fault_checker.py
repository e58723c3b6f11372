"""The fault-injection checker on hand-made histories: each anomaly is seen, and a clean
history passes. A checker that cannot fail would make every fault run pass."""

from __future__ import annotations

from fault_checker import History, check, split_value


def clean_history() -> History:
    """Two producers, two partitions, every record acknowledged, read and replicated."""
    log = {
        0: [(0, b"p0-0"), (1, b"p1-0"), (2, b"p0-2")],
        1: [(0, b"p0-1"), (1, b"p1-1")],
    }
    return History(
        acknowledged=[
            (p, offset, value) for p, records in log.items() for offset, value in records
        ],
        sent={value for records in log.values() for _, value in records},
        log={p: list(records) for p, records in log.items()},
        replicas={node: {p: list(records) for p, records in log.items()} for node in (1, 2, 3)},
        group_reads=[(0, 0, b"p0-0"), (0, 1, b"p1-0"), (1, 0, b"p0-1")],
        commits=[("confirmed", 0, 2), ("reported", 0, 2), ("confirmed", 1, 1)],
    )


def test_a_clean_history_passes() -> None:
    verdict = check(clean_history())
    assert verdict.ok, verdict.describe()


def test_an_acknowledged_value_missing_from_the_log_is_lost() -> None:
    history = clean_history()
    history.log[0] = history.log[0][:2]
    for replica in history.replicas.values():
        replica[0] = replica[0][:2]
    verdict = check(history)
    assert (verdict.lost, verdict.rewritten) == (1, 0), verdict.describe()


def test_a_value_at_another_offset_than_acknowledged_is_rewritten() -> None:
    history = clean_history()
    history.acknowledged[0] = (0, 5, b"p0-0")
    assert check(history).rewritten == 1


def test_a_value_nobody_sent_is_rewritten() -> None:
    history = clean_history()
    history.log[1].append((2, b"stranger-0"))
    for replica in history.replicas.values():
        replica[1].append((2, b"stranger-0"))
    assert check(history).rewritten == 1


def test_a_value_written_twice_is_a_duplicate_and_out_of_order() -> None:
    history = clean_history()
    history.log[0].append((3, b"p0-0"))
    for replica in history.replicas.values():
        replica[0].append((3, b"p0-0"))
    verdict = check(history)
    assert (verdict.duplicated, verdict.reordered) == (1, 1), verdict.describe()


def test_a_producer_sequence_that_goes_back_in_a_partition_is_reordered() -> None:
    history = clean_history()
    history.log[0] = [(0, b"p0-2"), (1, b"p1-0"), (2, b"p0-0")]
    for replica in history.replicas.values():
        replica[0] = list(history.log[0])
    history.acknowledged = [(0, 0, b"p0-2"), (0, 1, b"p1-0"), (0, 2, b"p0-0")]
    history.group_reads = []
    verdict = check(history)
    assert (verdict.reordered, verdict.lost, verdict.rewritten) == (1, 0, 0), verdict.describe()


def test_missing_offsets_are_gaps() -> None:
    history = clean_history()
    history.log[1] = [(0, b"p0-1"), (3, b"p1-1")]
    history.acknowledged = [a for a in history.acknowledged if a[0] == 0] + [
        (1, 0, b"p0-1"),
        (1, 3, b"p1-1"),
    ]
    for replica in history.replicas.values():
        replica[1] = list(history.log[1])
    history.commits = []
    assert check(history).gaps == 2


def test_a_replica_that_differs_short_or_long_is_divergent() -> None:
    history = clean_history()
    history.replicas[2][0][1] = (1, b"p1-9")
    history.replicas[3][1] = history.replicas[3][1][:1]
    history.replicas[1][1].append((2, b"p1-3"))
    assert check(history).divergent == 3


def test_a_group_read_of_a_value_the_log_took_back_is_dirty() -> None:
    history = clean_history()
    history.group_reads.append((1, 1, b"p1-7"))
    assert check(history).dirty_reads == 1


def test_committed_offsets_going_back_or_past_the_end_are_caught() -> None:
    history = clean_history()
    history.commits += [("reported", 0, 1), ("confirmed", 1, 9)]
    verdict = check(history)
    assert (verdict.commits_backwards, verdict.commits_past_end) == (1, 1), verdict.describe()


def test_fences_and_unhealed_rounds_count() -> None:
    history = clean_history()
    history.spurious_fences.append("round 3: broker 2 fenced by controller 1")
    history.unhealed_rounds.append("round 4: {}")
    verdict = check(history)
    assert (verdict.spurious_fences, verdict.unhealed, verdict.ok) == (1, 1, False)


def test_values_split_into_producer_and_sequence() -> None:
    assert split_value(b"p-1-12") == (b"p-1", 12)
    assert split_value(b"garbage") == (None, -1)
