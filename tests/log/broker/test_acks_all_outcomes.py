"""What a clustered leader answers an acks=all produce it has appended, whatever happens to
its leadership while the batch waits for the ISR.

A client takes NOT_LEADER_OR_FOLLOWER as "not persisted": an idempotent librdkafka producer
may then send the batch again under a new producer epoch, and the log holds it twice. So
the answer is that error only once the batch is gone from this replica's log; success once
the high watermark (this node's as leader, or the new leader's as a follower) passed it
with the batch still in the log; REQUEST_TIMED_OUT ("possibly persisted") while its fate is
unknown at the deadline. The retry of such a batch, with its producer id, epoch and
sequence, is answered with its original offset by the leader and by a new leader after a
failover, whose producer state came from the replicated batches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
import trio.testing

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import (
    ACKS_ALL,
    NO_LEADER,
    Partition,
    ProduceResult,
    ReplicaSettings,
)
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import Record, encode_batch

SETTINGS = ReplicaSettings(replica_lag_time_max_ms=10_000, min_insync_replicas=2)
REPLICAS = (1, 2)
WAIT_S = 5.0


def batch(sequence: int, count: int = 2) -> bytes:
    records = [Record(i, 1_000, None, f"r{sequence + i}".encode()) for i in range(count)]
    return encode_batch(records, producer_id=7, producer_epoch=0, base_sequence=sequence)


def replica(directory: Path, node_id: int) -> Partition:
    partition = Partition.open("t", 0, directory, LogConfig(), clock_ms=lambda: 0)
    partition.join_cluster(node_id)
    return partition


def replicate(leader: Partition, follower: Partition, *, heard: bool = True) -> None:
    """One replica fetch: the follower takes the leader's log from its own end, and the
    leader hears of its new end (unless ``heard`` is False: that fetch never arrives)."""
    data = leader.read_for_replica(follower.log.log_end_offset, 1 << 20)
    follower.append_replicated(
        data.read_bytes() if data is not None else b"", leader.high_watermark
    )
    if heard:
        leader.on_replica_fetch(follower.node_id, follower.log.log_end_offset, 0)


def appended_waiting(partition: Partition) -> tuple[ProduceResult, int]:
    """Append one acks=all batch; its result and the epoch the wait is held to."""
    result = partition.append(batch(0), acks=ACKS_ALL)
    assert result.error == ErrorCode.NONE
    return result, partition.epoch_of(result.last_offset)


async def answer_while(
    partition: Partition,
    result: ProduceResult,
    epoch: int,
    meanwhile: Callable[[], Awaitable[None]],
) -> ErrorCode:
    """Wait for the batch as the produce handler does, while ``meanwhile`` runs."""
    answers: list[ErrorCode] = []

    async def wait() -> None:
        deadline = trio.current_time() + WAIT_S
        answers.append(await partition.wait_replicated(result.last_offset, epoch, deadline))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        await meanwhile()
    [answer] = answers
    return answer


def run(test: Callable[[Path], Awaitable[None]], directory: Path) -> None:
    trio.run(test, directory, clock=trio.testing.MockClock(autojump_threshold=0))


async def check_epoch_moves_under_the_same_leader(directory: Path) -> None:
    leader = replica(directory / "1", 1)
    follower = replica(directory / "2", 2)
    leader.become_leader(3, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    follower.become_follower(1, 3, 0, REPLICAS)
    result, epoch = appended_waiting(leader)

    async def fenced_and_elected_again() -> None:
        # the metadata went leader 1 -> none -> leader 1; the broker may see either step
        leader.become_follower(NO_LEADER, 4, 1, REPLICAS)
        await trio.sleep(0.5)
        leader.become_leader(5, 2, REPLICAS, REPLICAS, SETTINGS, 0)
        follower.become_follower(1, 5, 2, REPLICAS)
        await trio.sleep(0.5)
        replicate(leader, follower)
        replicate(leader, follower)

    assert await answer_while(leader, result, epoch, fenced_and_elected_again) == ErrorCode.NONE
    leader.close()
    follower.close()


def test_an_appended_batch_is_acknowledged_once_replicated_though_its_leader_epoch_moved(
    tmp_path: Path,
) -> None:
    run(check_epoch_moves_under_the_same_leader, tmp_path)


async def check_a_new_leader_keeps_the_batch(directory: Path) -> None:
    old = replica(directory / "1", 1)
    new = replica(directory / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    result, epoch = appended_waiting(old)
    replicate(old, new, heard=False)  # the follower has the batch; the old leader never knows

    async def failover() -> None:
        new.become_leader(1, 1, REPLICAS, REPLICAS, SETTINGS, 0)
        old.become_follower(2, 1, 1, REPLICAS)
        await trio.sleep(0.5)
        replicate(new, old)  # the new leader's high watermark passes the batch
        replicate(new, old)

    assert await answer_while(old, result, epoch, failover) == ErrorCode.NONE
    old.close()
    new.close()


def test_a_batch_the_new_leader_kept_is_acknowledged_by_the_old_leader(tmp_path: Path) -> None:
    run(check_a_new_leader_keeps_the_batch, tmp_path)


async def check_an_unknown_fate_is_possibly_persisted(directory: Path) -> None:
    old = replica(directory / "1", 1)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    result, epoch = appended_waiting(old)

    async def leadership_moves_and_nothing_more_is_heard() -> None:
        old.become_follower(2, 1, 1, REPLICAS)

    answer = await answer_while(old, result, epoch, leadership_moves_and_nothing_more_is_heard)
    assert answer == ErrorCode.REQUEST_TIMED_OUT
    old.close()


def test_a_batch_whose_fate_is_unknown_at_the_deadline_is_answered_possibly_persisted(
    tmp_path: Path,
) -> None:
    run(check_an_unknown_fate_is_possibly_persisted, tmp_path)


async def check_a_truncated_batch_is_not_persisted(directory: Path) -> None:
    old = replica(directory / "1", 1)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    result, epoch = appended_waiting(old)

    async def the_new_leader_never_had_it() -> None:
        old.become_follower(2, 1, 1, REPLICAS)
        await trio.sleep(0.5)
        old.truncate_to(result.base_offset)

    answer = await answer_while(old, result, epoch, the_new_leader_never_had_it)
    assert answer == ErrorCode.NOT_LEADER_OR_FOLLOWER
    old.close()


def test_a_batch_truncated_away_after_a_failover_is_answered_not_persisted(
    tmp_path: Path,
) -> None:
    run(check_a_truncated_batch_is_not_persisted, tmp_path)


async def check_other_records_at_the_same_offsets(directory: Path) -> None:
    old = replica(directory / "1", 1)
    new = replica(directory / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    result, epoch = appended_waiting(old)

    async def rewritten_then_led_again() -> None:
        # the new leader never had the batch and wrote others at its offsets; the old
        # leader truncates, copies them, and leads again: those offsets are not its batch
        new.become_leader(1, 1, REPLICAS, (2,), SETTINGS, 0)
        assert (
            new.append(encode_batch([Record(i, 1_000, None, b"other") for i in range(2)])).error
            == 0
        )
        old.become_follower(2, 1, 1, REPLICAS)
        old.truncate_to(result.base_offset)
        replicate(new, old)
        new.become_follower(1, 2, 2, REPLICAS)
        old.become_leader(2, 2, REPLICAS, REPLICAS, SETTINGS, 0)
        replicate(old, new)
        replicate(old, new)

    answer = await answer_while(old, result, epoch, rewritten_then_led_again)
    assert answer == ErrorCode.NOT_LEADER_OR_FOLLOWER
    old.close()
    new.close()


def test_offsets_rewritten_by_another_leader_never_acknowledge_the_lost_batch(
    tmp_path: Path,
) -> None:
    run(check_other_records_at_the_same_offsets, tmp_path)


async def check_retries_after_a_failover(directory: Path) -> None:
    old = replica(directory / "1", 1)
    new = replica(directory / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    first = old.append(batch(0), acks=ACKS_ALL)
    second = old.append(batch(2), acks=ACKS_ALL)
    retried_on_the_leader = old.append(batch(2), acks=ACKS_ALL)
    assert (retried_on_the_leader.error, retried_on_the_leader.base_offset) == (0, 2)
    replicate(old, new)
    new.become_leader(1, 1, REPLICAS, REPLICAS, SETTINGS, 0)
    retried_on_the_new_leader = new.append(batch(2), acks=ACKS_ALL)
    assert (retried_on_the_new_leader.error, retried_on_the_new_leader.base_offset) == (
        ErrorCode.NONE,
        second.base_offset,
    )
    assert new.epoch_of(retried_on_the_new_leader.last_offset) == 0  # written in epoch 0
    assert new.log.log_end_offset == 4  # not appended again
    assert (first.base_offset, second.base_offset) == (0, 2)
    await trio.lowlevel.checkpoint()
    old.close()
    new.close()


def test_a_retried_batch_gets_its_original_offset_from_a_new_leader_after_failover(
    tmp_path: Path,
) -> None:
    run(check_retries_after_a_failover, tmp_path)


async def check_a_closed_partition_leaves_the_fate_unknown(directory: Path) -> None:
    leader = replica(directory / "1", 1)
    leader.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    result, epoch = appended_waiting(leader)

    async def closed_as_its_topic_is_deleted_or_the_broker_stops() -> None:
        leader.close()

    answer = await answer_while(
        leader, result, epoch, closed_as_its_topic_is_deleted_or_the_broker_stops
    )
    assert answer == ErrorCode.REQUEST_TIMED_OUT


def test_a_batch_waiting_when_its_partition_closes_is_answered_possibly_persisted(
    tmp_path: Path,
) -> None:
    run(check_a_closed_partition_leaves_the_fate_unknown, tmp_path)


async def check_a_retry_of_a_kept_batch_under_a_small_isr(directory: Path) -> None:
    old = replica(directory / "1", 1)
    new = replica(directory / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    original = old.append(batch(0), acks=ACKS_ALL)
    replicate(old, new)
    # the old leader is fenced: the new one leads with an ISR below min.insync.replicas
    new.become_leader(1, 1, REPLICAS, (2,), SETTINGS, 0)
    retried = new.append(batch(0), acks=ACKS_ALL)
    assert (retried.error, retried.base_offset) == (ErrorCode.NONE, original.base_offset)
    assert new.log.log_end_offset == 2  # not appended again
    fresh = new.append(batch(2), acks=ACKS_ALL)  # a new batch is still refused
    assert fresh.error == ErrorCode.NOT_ENOUGH_REPLICAS
    await trio.lowlevel.checkpoint()
    old.close()
    new.close()


def test_a_retried_batch_the_log_holds_is_answered_as_a_duplicate_while_the_isr_is_small(
    tmp_path: Path,
) -> None:
    """A client takes NOT_ENOUGH_REPLICAS as "not persisted": answering it to the retry of
    a batch the log holds lets an idempotent producer send it again under a new epoch."""
    run(check_a_retry_of_a_kept_batch_under_a_small_isr, tmp_path)


def answered_alike_then_resent(leader: Partition, refusal: ErrorCode) -> None:
    """The batch behind the refused one (sequence 2) gets the same ``refusal``, nothing is
    appended, and the client's resends of both, in order, are appended."""
    behind = leader.append(batch(4), acks=ACKS_ALL)
    assert behind.error == refusal, behind
    assert leader.log.log_end_offset == 2
    assert leader.append(batch(2), acks=ACKS_ALL).error == ErrorCode.NONE
    assert leader.append(batch(4), acks=ACKS_ALL).error == ErrorCode.NONE
    assert leader.log.log_end_offset == 6


async def check_a_batch_behind_a_refusal_for_a_small_isr(directory: Path) -> None:
    leader = replica(directory / "1", 1)
    follower = replica(directory / "2", 2)
    leader.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    follower.become_follower(1, 0, 0, REPLICAS)
    assert leader.append(batch(0), acks=ACKS_ALL).error == ErrorCode.NONE
    replicate(leader, follower)
    leader.become_leader(1, 1, REPLICAS, (1,), SETTINGS, 0)  # the ISR shrank
    assert leader.append(batch(2), acks=ACKS_ALL).error == ErrorCode.NOT_ENOUGH_REPLICAS
    leader.become_leader(1, 2, REPLICAS, REPLICAS, SETTINGS, 0)  # ... and grew back
    # the next pipelined batch was read only now
    answered_alike_then_resent(leader, ErrorCode.NOT_ENOUGH_REPLICAS)
    await trio.lowlevel.checkpoint()
    leader.close()
    follower.close()


def test_a_batch_behind_one_refused_for_a_small_isr_is_refused_alike_not_out_of_order(
    tmp_path: Path,
) -> None:
    """librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER on a batch behind a failed one by
    bumping its producer epoch and renumbering every unacknowledged message, including
    ones a killed leader appended without answering: they would be written twice."""
    run(check_a_batch_behind_a_refusal_for_a_small_isr, tmp_path)


async def check_a_batch_behind_a_refusal_before_leadership(directory: Path) -> None:
    old = replica(directory / "1", 1)
    new = replica(directory / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    assert old.append(batch(0), acks=ACKS_ALL).error == ErrorCode.NONE
    replicate(old, new)
    # the client heard of the new leader before the new leader did
    refused = new.append(batch(2), acks=ACKS_ALL)
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    new.become_leader(1, 1, REPLICAS, REPLICAS, SETTINGS, 0)
    answered_alike_then_resent(new, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    await trio.lowlevel.checkpoint()
    old.close()
    new.close()


def test_a_batch_behind_one_refused_before_leadership_arrived_is_refused_alike(
    tmp_path: Path,
) -> None:
    run(check_a_batch_behind_a_refusal_before_leadership, tmp_path)
