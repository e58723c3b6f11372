"""The controller quorum's Raft under a deterministic simulation: seeded faults (drops,
duplicates, partitions, crashes and restarts), with snapshots and truncated logs, against
the checker of ``raft_simulation``, and the single steps that matter, by hand."""

from __future__ import annotations

import os

import pytest
from raft_simulation import Faults, Simulation, run_seed

from eventplatform.log.cluster.raft import (
    BeginQuorumEpoch,
    DivergingEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    MemoryStorage,
    Message,
    NotLeaderError,
    RaftConfig,
    RaftNode,
    Role,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from eventplatform.log.invariants import InvariantError

SEEDS = int(os.environ.get("EVENTPLATFORM_SIM_SEEDS", "200"))


@pytest.mark.parametrize("voters", [3, 5])
def test_seeded_faults_never_break_safety_and_the_quorum_recovers(voters: int) -> None:
    outcomes = [run_seed(seed, voters=voters) for seed in range(SEEDS)]
    # the faults did happen, and work got done through them
    assert sum(o.crashes for o in outcomes) > SEEDS and sum(o.partitions for o in outcomes) > SEEDS
    assert sum(o.acknowledged for o in outcomes) > SEEDS * 100
    assert all(len(o.leaders) >= 1 for o in outcomes)
    # nearly every run snapshots and truncates (not those that commit too little), and
    # some nodes had to catch up by snapshot
    assert sum(o.snapshots > 0 for o in outcomes) >= SEEDS * 9 // 10
    assert sum(o.installs for o in outcomes) > SEEDS // 4


def test_a_seed_replays_exactly() -> None:
    assert run_seed(17) == run_seed(17)


def test_a_single_voter_leads_itself_and_commits_at_once() -> None:
    node = RaftNode(1, [1], MemoryStorage(), 0)
    assert node.tick(5_000) == []
    assert node.role is Role.LEADER and node.epoch == 1
    offset = node.propose([b"a", b"b"])
    assert offset == 1 and node.high_watermark == 3  # after the leader-change entry


def test_a_quiet_network_elects_one_leader_and_replicates() -> None:
    simulation = Simulation(
        3, faults=Faults(drop=0, duplicate=0, crash_every_ms=10**9, partition_every_ms=10**9)
    )
    simulation.run_until(3_000, simulation._has_leader)
    leaders = [r for r in simulation.nodes.values() if r is not None and r.role is Role.LEADER]
    assert len(leaders) == 1
    leader = leaders[0]
    offset = leader.propose([b"x"])
    simulation.run_until(simulation.now_ms + 1_000)
    for raft in simulation.nodes.values():
        assert raft is not None and raft.committed()[offset] == Entry(leader.epoch, b"x")


def test_a_vote_goes_to_an_up_to_date_candidate_only_once_per_epoch() -> None:
    storage = MemoryStorage(log=[Entry(1, b""), Entry(2, b"")])
    voter = RaftNode(1, [1, 2, 3], storage, 0)
    stale = Message(2, 1, VoteRequest(3, 2, last_epoch=1, end_offset=5))
    assert voter.receive(stale, 0)[0].body == VoteResponse(3, granted=False)
    current = Message(3, 1, VoteRequest(3, 3, last_epoch=2, end_offset=2))
    assert voter.receive(current, 0)[0].body == VoteResponse(3, granted=True)
    other = Message(2, 1, VoteRequest(3, 2, last_epoch=2, end_offset=9))
    assert voter.receive(other, 0)[0].body == VoteResponse(3, granted=False)
    assert storage.load_state() == (3, 3)  # the vote was stored before the answer left


def test_a_follower_truncates_a_diverging_suffix_by_epoch() -> None:
    storage = MemoryStorage(epoch=3, log=[Entry(1, b"a"), Entry(2, b"stale"), Entry(2, b"x")])
    follower = RaftNode(2, [1, 2, 3], storage, 0)
    follower.receive(Message(1, 2, BeginQuorumEpoch(3, 1)), 0)
    diverged = FetchResponse(3, 1, 3, high_watermark=1, diverging=DivergingEpoch(1, 1))
    [again] = follower.receive(Message(1, 2, diverged), 1)
    assert follower.log == [Entry(1, b"a")]
    assert again.body == FetchRequest(3, 1, 1)


def test_a_follower_whose_last_epoch_the_leader_never_had_catches_up() -> None:
    """The follower holds entries of epoch 2 that the leader never had, after entries of
    epoch 1 it has fewer of than the leader. The leader names epoch 1, which ends at
    offset 6 in its log; the follower must cut at the end of its own epoch 1 (3), not at
    6, or it keeps its epoch-2 entries and asks the same question for ever (with two
    such followers nothing commits again)."""
    leader_log = [Entry(1, b"a%d" % i) for i in range(6)] + [Entry(3, b"")]
    leader = RaftNode(1, [1, 2, 3], MemoryStorage(epoch=3, voted_for=1, log=leader_log), 0)
    leader.tick(5_000)
    for voter in (2, 3):
        leader.receive(Message(voter, 1, VoteResponse(4, granted=True)), 5_000)
    assert leader.role is Role.LEADER
    follower_log = [Entry(1, b"a%d" % i) for i in range(3)] + [Entry(2, b"x")] * 4
    follower = RaftNode(2, [1, 2, 3], MemoryStorage(epoch=2, log=follower_log), 0)
    follower.receive(Message(1, 2, BeginQuorumEpoch(leader.epoch, 1)), 5_000)
    [request] = follower.tick(5_000)
    for _ in range(10):
        [answer] = leader.receive(request, 5_000)
        [request] = follower.receive(answer, 5_000)
        if follower.end_offset == leader.end_offset:
            break
    assert follower.log == leader.log


def test_nothing_at_or_below_the_high_watermark_is_truncated() -> None:
    follower = RaftNode(2, [1, 2, 3], MemoryStorage(epoch=2, log=[Entry(1, b"a")]), 0)
    follower.receive(Message(1, 2, BeginQuorumEpoch(2, 1)), 0)
    follower.receive(Message(1, 2, FetchResponse(2, 1, 1, high_watermark=1)), 0)
    assert follower.high_watermark == 1
    bad = FetchResponse(2, 1, 1, diverging=DivergingEpoch(0, 0))
    with pytest.raises(InvariantError, match="below the high watermark"):
        follower.receive(Message(1, 2, bad), 0)


def test_a_leader_cut_off_from_its_quorum_resigns() -> None:
    node = RaftNode(1, [1, 2, 3], MemoryStorage(), 0)
    node.tick(5_000)
    for voter in (2, 3):
        node.receive(Message(voter, 1, VoteResponse(1, granted=True)), 5_000)
    assert node.role is Role.LEADER
    node.tick(5_000 + node.config.fetch_timeout_ms)
    assert node.role is Role.UNATTACHED
    with pytest.raises(NotLeaderError):
        node.propose([b"late"])


def _following(leader: int, node_id: int, now: int) -> RaftNode:
    """Voter ``node_id`` of three, following ``leader`` in epoch 1 since ``now``."""
    node = RaftNode(node_id, [1, 2, 3], MemoryStorage(), 0, seed=node_id)
    node.receive(Message(leader, node_id, BeginQuorumEpoch(1, leader)), now)
    assert (node.role, node.leader) == (Role.FOLLOWER, leader)
    return node


def _stands_at(node: RaftNode, start: int, end: int) -> int | None:
    """The first millisecond in [start, end) at which ``node`` asks for votes."""
    for now in range(start, end):
        if any(isinstance(m.body, VoteRequest) for m in node.tick(now)):
            return now
    return None


def test_a_follower_whose_leader_s_port_refuses_stands_within_the_election_timeout() -> None:
    """A refused connection means no process listens at the leader's address: the
    follower stands within a randomized part of the election timeout, instead of
    waiting out the whole fetch timeout first."""
    config = RaftConfig()
    node = _following(1, 2, 1_000)
    node.peer_refused(1, 1_100)
    stood = _stands_at(node, 1_100, 1_000 + config.fetch_timeout_ms)
    assert stood is not None and stood < 1_100 + config.election_timeout_ms
    assert node.role is Role.CANDIDATE and node.epoch == 2


def test_a_refusal_by_another_voter_or_an_answer_from_the_leader_changes_nothing() -> None:
    config = RaftConfig()
    bystander = _following(1, 2, 1_000)
    bystander.peer_refused(3, 1_100)  # not the leader
    assert _stands_at(bystander, 1_100, 1_000 + config.fetch_timeout_ms) is None

    answered = _following(1, 2, 1_000)
    answered.peer_refused(1, 1_100)
    # the leader answers before the follower stands: it was a passing refusal
    answered.receive(Message(1, 2, FetchResponse(1, 1, 0, high_watermark=0)), 1_101)
    assert _stands_at(answered, 1_101, 1_101 + config.fetch_timeout_ms) is None
    # the refusal counts once per epoch: later ones do not bring the election forward
    answered.peer_refused(1, 1_200)
    assert _stands_at(answered, 1_200, 1_101 + config.fetch_timeout_ms) is None


def test_followers_of_one_leader_do_not_all_stand_at_the_same_moment() -> None:
    """They heard the leader last at the same moment; each waits the fetch timeout and a
    random part of half the election timeout, so one usually asks before the other does
    and gets its vote, instead of both voting for themselves."""
    config = RaftConfig()
    end = 1_000 + config.fetch_timeout_ms + config.election_timeout_ms // 2 + 1
    stood = {node: _stands_at(_following(1, node, 1_000), 1_000, end) for node in (2, 3)}
    for moment in stood.values():
        assert moment is not None and moment >= 1_000 + config.fetch_timeout_ms
    assert stood[2] != stood[3]


def test_a_voter_that_refuses_a_candidate_with_a_shorter_log_stands_soon() -> None:
    config = RaftConfig()
    longer = RaftNode(3, [1, 2, 3], MemoryStorage(epoch=1, log=[Entry(1, b"a")] * 3), 0)
    request = VoteRequest(2, candidate=2, last_epoch=1, end_offset=1)
    [answer] = longer.receive(Message(2, 3, request), 1_000)
    assert answer.body == VoteResponse(2, granted=False)
    stood = _stands_at(longer, 1_000, 1_000 + config.election_timeout_ms)
    assert stood is not None and stood < 1_000 + config.election_timeout_ms // 4


def _deliver(
    nodes: dict[int, RaftNode], messages: list[Message], now: int, *, to: set[int]
) -> list[Message]:
    """Deliver the messages addressed to ``to``; returns what the deliveries sent."""
    sent: list[Message] = []
    for message in messages:
        if message.receiver in to:
            sent += nodes[message.receiver].receive(message, now)
    return sent


def test_entries_of_an_earlier_epoch_commit_only_with_one_of_the_leader_s_own() -> None:
    """Raft's Figure 8: a leader must not count replicas of an earlier epoch's entry as its
    commitment, or a later leader may overwrite an entry that was reported committed."""
    config = RaftConfig(fetch_entries_max=1)
    a, x, y = Entry(1, b"a"), Entry(2, b"x"), Entry(3, b"y")
    logs = {1: [a, x], 2: [a, x], 3: [a], 4: [a], 5: [a, y]}
    storages = {n: MemoryStorage(epoch=3, log=list(log)) for n, log in logs.items()}
    nodes = {n: RaftNode(n, [1, 2, 3, 4, 5], storages[n], 0, config=config) for n in logs}

    # S1 wins epoch 4 with S2 and S3; S3 fetches x; both fetch past x, answers lost
    requests = nodes[1].tick(10_000)
    answers = _deliver(nodes, requests, 10_000, to={2, 3})
    announced = _deliver(nodes, answers, 10_000, to={1})
    assert nodes[1].role is Role.LEADER and nodes[1].epoch == 4
    from_3 = _deliver(nodes, announced, 10_000, to={3})
    from_3 = _deliver(nodes, _deliver(nodes, from_3, 10_000, to={1}), 10_000, to={3})
    assert nodes[3].log == [a, x]  # x is on S1, S2 and S3 now: a majority, but of epoch 2
    _deliver(nodes, from_3 + _deliver(nodes, announced, 10_000, to={2}), 10_000, to={1})
    assert nodes[1].high_watermark <= 1, "x counted committed without an entry of epoch 4"

    # S1 dies; S5 wins with S3 and S4 (at the second try: S3 follows S1 in epoch 4)
    del nodes[1]
    for now in (20_000, 40_000):
        answers = _deliver(nodes, nodes[5].tick(now), now, to={3, 4})
        announced = _deliver(nodes, answers, now, to={5})
    assert nodes[5].role is Role.LEADER and nodes[5].epoch == 5
    # ... and overwrites x on S3, which is allowed: x was never committed
    fetches = _deliver(nodes, announced, 40_000, to={3, 4})
    for _ in range(4):
        fetches = _deliver(nodes, _deliver(nodes, fetches, 40_000, to={5}), 40_000, to={3, 4})
    assert nodes[3].log[:2] == [a, y]


# ---------------------------------------------------------------- snapshots, by hand

SNAPSHOT = SnapshotId(10, 3)


def snapshotted(log: list[Entry], epoch: int = 4) -> MemoryStorage:
    """A voter's storage whose log starts at SNAPSHOT with ``log`` after it."""
    return MemoryStorage(epoch=epoch, log=log, start=SNAPSHOT, kept={SNAPSHOT: b"state@10"})


def test_a_log_that_starts_at_a_snapshot_votes_and_answers_epochs_from_it() -> None:
    voter = RaftNode(1, [1, 2, 3], snapshotted([]), 0)
    assert (voter.log_start, voter.end_offset, voter.last_epoch) == (10, 10, 3)
    assert voter.high_watermark == 10 and voter.epoch_at(10) == 3
    behind = Message(2, 1, VoteRequest(5, 2, last_epoch=2, end_offset=40))
    assert voter.receive(behind, 0)[0].body == VoteResponse(5, granted=False)
    current = Message(3, 1, VoteRequest(5, 3, last_epoch=3, end_offset=10))
    assert voter.receive(current, 0)[0].body == VoteResponse(5, granted=True)

    with_entries = RaftNode(1, [1, 2, 3], snapshotted([Entry(4, b""), Entry(4, b"a")]), 0)
    assert with_entries.end_of_epoch(3) == DivergingEpoch(3, 10)  # ends at the log start
    assert with_entries.end_of_epoch(2) == DivergingEpoch(0, 0)  # before it: unknown here
    assert with_entries.end_of_epoch(4) == DivergingEpoch(4, 12)
    assert with_entries.entry(11) == Entry(4, b"a")


def leading(storage: MemoryStorage) -> RaftNode:
    """Node 1 of three, leading epoch 5 (its log: the snapshot, then ``storage.log``)."""
    node = RaftNode(1, [1, 2, 3], storage, 0)
    node.tick(5_000)
    node.receive(Message(2, 1, VoteResponse(node.epoch, granted=True)), 5_000)
    assert node.role is Role.LEADER
    return node


def test_a_leader_sends_the_snapshot_id_to_a_follower_below_its_log_start() -> None:
    leader = leading(snapshotted([Entry(4, b"a")]))
    epoch = leader.epoch
    [below] = leader.receive(Message(2, 1, FetchRequest(epoch, 4, 2)), 5_001)
    assert below.body == FetchResponse(epoch, 1, 4, high_watermark=10, snapshot=SNAPSHOT)
    # a follower at 12 whose last epoch (2) the leader's log shows only below its start
    [diverged] = leader.receive(Message(2, 1, FetchRequest(epoch, 12, 2)), 5_001)
    assert isinstance(diverged.body, FetchResponse) and diverged.body.snapshot == SNAPSHOT
    # a follower at 12 in epoch 3: the log start is where epoch 3 ends
    [truncate] = leader.receive(Message(2, 1, FetchRequest(epoch, 12, 3)), 5_001)
    assert isinstance(truncate.body, FetchResponse)
    assert truncate.body.diverging == DivergingEpoch(3, 10)
    [entries] = leader.receive(Message(2, 1, FetchRequest(epoch, 10, 3)), 5_001)
    assert isinstance(entries.body, FetchResponse)
    assert entries.body.entries == (Entry(4, b"a"), Entry(epoch, b""))
    [chunk] = leader.receive(Message(2, 1, FetchSnapshotRequest(epoch, SNAPSHOT, 5)), 5_001)
    assert chunk.body == FetchSnapshotResponse(epoch, 1, SNAPSHOT, 5, b"@10", 8)
    gone = SnapshotId(7, 2)
    [refused] = leader.receive(Message(2, 1, FetchSnapshotRequest(epoch, gone, 0)), 5_001)
    assert refused.body == FetchSnapshotResponse(epoch, 1, gone, 0)  # size -1: fetch again


def test_a_follower_installs_a_snapshot_in_chunks_and_fetches_on_from_its_end() -> None:
    """Leader and follower exchange messages directly: the follower, with a stale log,
    ends with the leader's snapshot and log, and what it had is gone."""
    config = RaftConfig(snapshot_chunk_bytes=3)
    leader = RaftNode(1, [1, 2, 3], snapshotted([Entry(4, b"a")]), 0, config=config)
    stale = MemoryStorage(epoch=2, log=[Entry(1, b"old"), Entry(2, b"uncommitted")])
    follower = RaftNode(2, [1, 2, 3], stale, 0, config=config)
    messages = leader.tick(5_000)
    messages += leader.receive(Message(3, 1, VoteResponse(leader.epoch, granted=True)), 5_000)
    kinds = set()
    for _ in range(30):
        sent: list[Message] = []
        for message in messages:
            kinds.add(type(message.body).__name__)
            if message.receiver == 2:
                sent += follower.receive(message, 5_001)
            elif message.receiver == 1:
                sent += leader.receive(message, 5_001)
        messages = sent
    assert {"FetchSnapshotRequest", "FetchSnapshotResponse"} <= kinds
    assert follower.log_start == 10 and follower.latest_snapshot == SNAPSHOT
    assert stale.kept == {SNAPSHOT: b"state@10"} and stale.start == SNAPSHOT
    assert follower.log == leader.log and follower.end_offset == leader.end_offset
    assert follower.high_watermark == leader.high_watermark == leader.end_offset


def test_a_snapshot_truncates_the_log_below_the_oldest_one_kept() -> None:
    storage = MemoryStorage()
    node = RaftNode(1, [1], storage, 0)
    node.tick(5_000)
    node.propose([b"a", b"b", b"c", b"d"])
    assert node.high_watermark == 5
    node.snapshot(2, b"s2")
    assert (node.log_start, node.start) == (2, SnapshotId(2, 1))
    node.snapshot(4, b"s4")
    assert node.log_start == 2  # the log starts at the oldest snapshot kept
    node.snapshot(5, b"s5")
    assert node.log_start == 4 and storage.snapshots() == [SnapshotId(4, 1), SnapshotId(5, 1)]
    assert node.committed() == [Entry(1, b"d")]  # offset 0 is the leader-change entry
    again = RaftNode(1, [1], storage, 10_000)  # a restart: the snapshot is committed
    assert again.high_watermark == 5 and again.latest_snapshot == SnapshotId(5, 1)
    with pytest.raises(InvariantError, match="outside the committed log"):
        again.snapshot(6, b"not committed")
