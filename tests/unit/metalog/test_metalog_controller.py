"""QuorumController: each command, each refusal, the broker lifecycle and elections."""

from __future__ import annotations

import dataclasses

import pytest

from metalog.commands import (
    AllocateProducerIds,
    AlterConfigs,
    AlterPartition,
    BrokerHeartbeat,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ElectionType,
    ElectLeaders,
    IsrMember,
    PartitionStateChange,
    RegisterBroker,
    UnregisterBroker,
)
from metalog.controller import ControllerConfig, QuorumController
from metalog.delta import decode_snapshot, encode_snapshot
from metalog.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    TopicExistsError,
    TopicIdRetiredError,
    UnknownTopicOrPartitionError,
)
from metalog.image import RETIRED_TOPIC_IDS_MAX, MetadataImage, PMap
from metalog.records import (
    NO_LEADER,
    BrokerId,
    ConfigResourceType,
    LeaderRecoveryState,
    NoOpRecord,
    PartitionChangeRecord,
    TopicId,
    TopicRecord,
    decode_record,
    encode_record,
)
from tests.unit.metalog.metalog_harness import Harness

# --------------------------------------------------------------------------- helpers


def cluster(*ids: int, **kw: object) -> Harness:
    h = Harness(**kw)  # type: ignore[arg-type]
    h.add_brokers(*ids)
    return h


def alter(
    h: Harness,
    name: str,
    p: int,
    isr: tuple[int, ...],
    *,
    sender: int | None = None,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    epochs: dict[int, int] | None = None,
    recovery: int = 0,
) -> object:
    reg = h.part(name, p)
    tid = h.image.topics.by_name[name]
    sender = reg.leader if sender is None else sender
    resp = h.run(
        AlterPartition(
            broker_id=sender,
            broker_epoch=h.epochs[sender],
            partitions=(
                PartitionStateChange(
                    topic_id=tid,
                    partition=p,
                    leader_epoch=reg.leader_epoch if leader_epoch is None else leader_epoch,
                    partition_epoch=reg.partition_epoch
                    if partition_epoch is None
                    else partition_epoch,
                    new_isr=tuple(IsrMember(b, (epochs or {}).get(b, -1)) for b in isr),
                    leader_recovery_state=recovery,
                ),
            ),
        )
    )
    (result,) = resp.results
    return result


# --------------------------------------------------------------------------- create topics


def test_create_topic_writes_topic_then_partitions_with_leader_first_isr_member() -> None:
    h = cluster(1, 2, 3)
    res = h.submit(
        CreateTopic(
            name="orders", num_partitions=3, replication_factor=2, configs={"retention.ms": "1000"}
        )
    )
    kinds = [type(r).__name__ for r in res.records]
    assert kinds == ["TopicRecord", "ConfigRecord", *["PartitionRecord"] * 3]
    h.commit()
    t = h.image.topics.get("orders")
    assert t is not None and t.topic_id == res.response.topic_id and len(t.topic_id) == 22
    for p in range(3):
        reg = t.partitions[p]
        assert len(reg.replicas) == 2 and reg.isr == reg.replicas
        assert reg.leader == reg.replicas[0]
        assert (reg.leader_epoch, reg.partition_epoch) == (0, 0)
    assert h.image.configs.topic_config("orders", "retention.ms") == "1000"
    assert h.image.configs.topic_config("orders", "segment.bytes") == "1073741824"


def test_create_topic_uses_cluster_defaults_for_partitions_and_replication() -> None:
    h = Harness(
        ControllerConfig(
            default_num_partitions=4, default_replication_factor=2, noop_interval_ms=None
        )
    )
    h.add_brokers(1, 2)
    resp = h.run(CreateTopic(name="t"))
    assert (resp.num_partitions, resp.replication_factor) == (4, 2)


def test_create_with_a_caller_chosen_id_is_idempotent() -> None:
    """The retry of a create whose first attempt took effect (answer lost in a failover) is
    answered as created; another create of the name, or reuse of the id, is refused."""
    h = cluster(1, 2, 3)
    first = h.run(
        CreateTopic(
            name="t",
            num_partitions=2,
            replication_factor=3,
            topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA"),
        )
    )
    assert first.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert h.image.topics.get("t").topic_id == first.topic_id  # type: ignore[union-attr]
    again = h.submit(
        CreateTopic(
            name="t",
            num_partitions=2,
            replication_factor=3,
            topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA"),
        )
    )
    assert again.records == ()
    assert (
        again.response.topic_id,
        again.response.num_partitions,
        again.response.replication_factor,
    ) == (first.topic_id, 2, 3)
    assert again.response.assignments == first.assignments
    with pytest.raises(TopicExistsError):
        h.submit(CreateTopic(name="t", topic_id=TopicId("BBBBBBBBBBBBBBBBBBBBBB")))
    with pytest.raises(TopicExistsError):
        h.submit(CreateTopic(name="t"))
    with pytest.raises(InvalidRequestError, match="in use"):
        h.submit(CreateTopic(name="u", topic_id=TopicId("AAAAAAAAAAAAAAAAAAAAAA")))


def test_a_create_retried_after_its_topic_was_deleted_does_not_bring_it_back() -> None:
    """Finding 4 of docs/fault-injection.md: a create's first attempt commits, its answer is
    lost, another client deletes the topic, and the retry (same caller-chosen id) arrives.
    The image remembers the deleted id, through a snapshot too, and the retry is refused as
    retired rather than carried out a second time."""
    h = cluster(1, 2, 3)
    tid = TopicId("AAAAAAAAAAAAAAAAAAAAAA")
    h.run(CreateTopic(name="t", num_partitions=1, replication_factor=1, topic_id=tid))
    h.run(DeleteTopic(name="t"))
    for _ in range(2):
        with pytest.raises(TopicIdRetiredError):
            h.submit(CreateTopic(name="t", num_partitions=1, replication_factor=1, topic_id=tid))
        assert h.image.topics.get("t") is None
        # A controller that starts from a snapshot of this image remembers the id as well.
        restored = decode_snapshot(encode_snapshot(h.image))
        assert restored.topics.retired == h.image.topics.retired
        assert tid in restored.topics.retired
        h.ctl.restore(restored)
        h.ctl.become_active(h.ctl.controller_epoch or 1, 0)
    # Another create of the name, with a fresh id, goes ahead.
    assert h.run(CreateTopic(name="t", num_partitions=1, replication_factor=1)).topic_id != tid


def test_the_image_remembers_only_the_latest_deleted_topic_ids() -> None:
    from metalog import delta as delta_mod

    base = PMap({TopicId(f"id{i:06d}"): i for i in range(RETIRED_TOPIC_IDS_MAX)})
    merged = delta_mod._retire(base, {TopicId("newest"): RETIRED_TOPIC_IDS_MAX})
    assert len(merged) == RETIRED_TOPIC_IDS_MAX * 9 // 10
    assert TopicId("newest") in merged and TopicId(f"id{RETIRED_TOPIC_IDS_MAX - 1:06d}") in merged
    assert TopicId("id000000") not in merged


def test_create_topic_validate_only_writes_nothing() -> None:
    h = cluster(1)
    res = h.submit(CreateTopic(name="t", num_partitions=2, validate_only=True))
    assert res.records == () and res.response.num_partitions == 2
    assert h.image.topics.get("t") is None


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "tö", "a/b", "x:y"])
def test_create_topic_refuses_illegal_names(name: str) -> None:
    h = cluster(1)
    with pytest.raises(InvalidTopicError):
        h.run(CreateTopic(name=name))


def test_create_topic_accepts_249_legal_characters() -> None:
    h = cluster(1)
    h.create("a.B_c-9" + "x" * 242)


def test_create_topic_refuses_existing_name() -> None:
    h = cluster(1)
    h.create("t")
    with pytest.raises(TopicExistsError) as e:
        h.run(CreateTopic(name="t"))
    assert e.value.code == "TOPIC_ALREADY_EXISTS"


def test_create_topic_checks_pending_uncommitted_topics_too() -> None:
    h = cluster(1)
    h.submit(CreateTopic(name="t"))  # proposed, not committed
    with pytest.raises(TopicExistsError):
        h.submit(CreateTopic(name="t"))
    h.commit()
    assert len(h.image.topics) == 1


def test_create_topic_refuses_names_colliding_after_dot_underscore() -> None:
    h = cluster(1)
    h.create("a.b")
    with pytest.raises(InvalidTopicError, match="collides"):
        h.run(CreateTopic(name="a_b"))


def test_create_topic_refuses_more_replicas_than_unfenced_brokers() -> None:
    h = cluster(1, 2)
    h.register(3)  # registered but fenced: not usable
    with pytest.raises(InvalidReplicationFactorError) as e:
        h.run(CreateTopic(name="t", replication_factor=3))
    assert e.value.code == "INVALID_REPLICATION_FACTOR"


@pytest.mark.parametrize("n", [0, -1, 100_001])
def test_create_topic_refuses_bad_partition_counts(n: int) -> None:
    h = cluster(1)
    with pytest.raises(InvalidPartitionsError):
        h.run(CreateTopic(name="t", num_partitions=n))


def test_create_topic_refuses_zero_replication_factor() -> None:
    h = cluster(1)
    with pytest.raises(InvalidReplicationFactorError):
        h.run(CreateTopic(name="t", replication_factor=0))


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.ms": "soon"},
        {"retention.ms": "-2"},
        {"cleanup.policy": "keep"},
        {"min.insync.replicas": "0"},
        {"unclean.leader.election.enable": "yes"},
        {"no.such.config": "1"},
        {"min.cleanable.dirty.ratio": "2"},
    ],
)
def test_create_topic_refuses_invalid_configs(configs: dict[str, str]) -> None:
    h = cluster(1)
    with pytest.raises(InvalidConfigurationError) as e:
        h.run(CreateTopic(name="t", configs=configs))
    assert e.value.code == "INVALID_CONFIG"


def test_create_topic_with_explicit_assignment() -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (3, 1), 1: (2, 3)}))
    assert h.part("t", 0).replicas == (3, 1) and h.part("t", 0).leader == 3
    assert h.part("t", 1).replicas == (2, 3) and h.part("t", 1).leader == 2


def test_create_topic_assignment_leaves_fenced_replicas_out_of_isr() -> None:
    h = cluster(1, 2)
    h.register(3)
    h.run(CreateTopic(name="t", assignments={0: (3, 1)}))
    assert h.part("t").isr == (1,) and h.part("t").leader == 1


@pytest.mark.parametrize(
    "assignments",
    [
        {0: (1,), 2: (2,)},  # gap
        {1: (1,)},  # does not start at 0
        {0: (1, 1)},  # duplicate replica
        {0: ()},  # empty
        {0: (1, 9)},  # unregistered broker
        {0: (1, 2), 1: (1,)},  # mixed replication factors
    ],
)
def test_create_topic_refuses_bad_assignments(assignments: dict[int, tuple[int, ...]]) -> None:
    h = cluster(1, 2)
    with pytest.raises(InvalidReplicaAssignmentError):
        h.run(CreateTopic(name="t", assignments=assignments))


def test_create_topic_refuses_assignment_of_only_fenced_brokers() -> None:
    h = cluster(1)
    h.register(2)
    with pytest.raises(InvalidReplicaAssignmentError, match="fenced"):
        h.run(CreateTopic(name="t", assignments={0: (2,)}))


def test_create_topic_refuses_assignment_together_with_counts() -> None:
    h = cluster(1)
    with pytest.raises(InvalidRequestError):
        h.run(CreateTopic(name="t", num_partitions=1, assignments={0: (1,)}))


def test_handle_never_mutates_the_image() -> None:
    h = cluster(1, 2)
    before = h.image
    records = list(before.records())
    h.submit(CreateTopic(name="t", num_partitions=3, replication_factor=2))
    assert h.image is before and list(h.image.records()) == records
    assert h.ctl.latest_image.topics.get("t") is not None
    assert h.ctl.pending_records == 4


# --------------------------------------------------------------------------- delete, grow, configs


def test_delete_topic_removes_it_and_its_configs() -> None:
    h = cluster(1)
    tid = h.create("t", configs={"retention.ms": "5"})
    resp = h.run(DeleteTopic(name="t"))
    assert resp.topic_id == tid
    assert h.image.topics.get("t") is None and h.image.topics.get_by_id(tid) is None
    assert h.image.configs.get(ConfigResourceType.TOPIC, "t") == {}
    h.create("t")  # the name is free again, with a new id and default configs
    assert h.image.topics.by_name["t"] != tid
    assert h.image.configs.topic_config("t", "retention.ms") == "604800000"


def test_delete_topic_by_id() -> None:
    h = cluster(1)
    tid = h.create("t")
    assert h.run(DeleteTopic(topic_id=tid)).name == "t"


def test_delete_unknown_topic_is_refused() -> None:
    h = cluster(1)
    with pytest.raises(UnknownTopicOrPartitionError) as e:
        h.run(DeleteTopic(name="nope"))
    assert e.value.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_create_partitions_adds_partitions_with_the_same_replication() -> None:
    h = cluster(1, 2, 3)
    h.create("t", 2, 2)
    resp = h.run(CreatePartitions(name="t", total_count=5))
    assert resp.total_count == 5 and len(resp.new_assignments) == 3
    t = h.image.topics.get("t")
    assert t is not None and sorted(t.partitions) == [0, 1, 2, 3, 4]
    assert all(len(reg.replicas) == 2 for reg in t.partitions.values())


def test_create_partitions_with_assignment() -> None:
    h = cluster(1, 2)
    h.create("t", 1, 1)
    h.run(CreatePartitions(name="t", total_count=2, assignments=((2,),)))
    assert h.part("t", 1).replicas == (2,)


@pytest.mark.parametrize("count", [1, 2])
def test_create_partitions_refuses_shrinking_or_same_count(count: int) -> None:
    h = cluster(1)
    h.create("t", 2)
    with pytest.raises(InvalidPartitionsError):
        h.run(CreatePartitions(name="t", total_count=count))


def test_create_partitions_refuses_wrong_assignments() -> None:
    h = cluster(1, 2)
    h.create("t", 1, 1)
    with pytest.raises(InvalidReplicaAssignmentError):
        h.run(CreatePartitions(name="t", total_count=3, assignments=((1,),)))
    with pytest.raises(InvalidReplicaAssignmentError, match="inconsistent"):
        h.run(CreatePartitions(name="t", total_count=2, assignments=((1, 2),)))


def test_create_partitions_of_unknown_topic_is_refused() -> None:
    h = cluster(1)
    with pytest.raises(UnknownTopicOrPartitionError):
        h.run(CreatePartitions(name="nope", total_count=3))


def test_alter_configs_sets_and_deletes_incrementally() -> None:
    h = cluster(1)
    h.create("t", configs={"retention.ms": "5", "segment.bytes": "1000"})
    resp = h.run(
        AlterConfigs(
            resource_type=ConfigResourceType.TOPIC,
            resource_name="t",
            ops={"retention.ms": None, "cleanup.policy": "compact"},
        )
    )
    assert resp.changed == {"retention.ms": None, "cleanup.policy": "compact"}
    assert h.image.configs.get(ConfigResourceType.TOPIC, "t") == {
        "segment.bytes": "1000",
        "cleanup.policy": "compact",
    }


def test_alter_configs_without_change_writes_nothing() -> None:
    h = cluster(1)
    h.create("t", configs={"retention.ms": "5"})
    res = h.submit(
        AlterConfigs(
            resource_type=ConfigResourceType.TOPIC, resource_name="t", ops={"retention.ms": "5"}
        )
    )
    assert res.records == ()


def test_cluster_config_is_the_default_for_every_topic() -> None:
    h = cluster(1)
    h.create("a")
    h.create("b", configs={"retention.ms": "7"})
    h.run(
        AlterConfigs(
            resource_type=ConfigResourceType.CLUSTER, resource_name="", ops={"retention.ms": "99"}
        )
    )
    assert h.image.configs.topic_config("a", "retention.ms") == "99"
    assert h.image.configs.topic_config("b", "retention.ms") == "7"
    assert h.image.configs.topic_configs("a")["retention.ms"] == "99"


@pytest.mark.parametrize(
    ("rtype", "rname", "ops", "error"),
    [
        (ConfigResourceType.TOPIC, "nope", {"retention.ms": "1"}, UnknownTopicOrPartitionError),
        (ConfigResourceType.TOPIC, "t", {"retention.ms": "x"}, InvalidConfigurationError),
        (ConfigResourceType.TOPIC, "t", {"bogus": "1"}, InvalidConfigurationError),
        (ConfigResourceType.BROKER, "abc", {"x": "1"}, InvalidRequestError),
        (ConfigResourceType.CLUSTER, "x", {"x": "1"}, InvalidRequestError),
        (ConfigResourceType.CLUSTER, "", {"segment.bytes": "1"}, InvalidConfigurationError),
    ],
)
def test_alter_configs_refusals(
    rtype: ConfigResourceType, rname: str, ops: dict[str, str | None], error: type[Exception]
) -> None:
    h = cluster(1)
    h.create("t")
    with pytest.raises(error):
        h.run(AlterConfigs(resource_type=rtype, resource_name=rname, ops=ops))


def test_alter_configs_broker_resource_accepts_any_key() -> None:
    h = cluster(1)
    h.run(
        AlterConfigs(
            resource_type=ConfigResourceType.BROKER, resource_name="1", ops={"log.dirs": "/x"}
        )
    )
    assert h.image.configs.get(ConfigResourceType.BROKER, "1") == {"log.dirs": "/x"}


# --------------------------------------------------------------------------- brokers


def test_broker_epoch_is_the_offset_of_its_registration_record() -> None:
    h = cluster(1)
    epoch = h.register(2)
    reg = h.image.brokers.get(2)
    assert reg is not None and reg.broker_epoch == epoch == h.offset
    assert reg.fenced


def test_registration_response_before_commit_has_no_epoch() -> None:
    h = Harness()
    res = h.submit(RegisterBroker(broker_id=1, incarnation_id="a"))
    assert res.response.broker_epoch == -1
    assert res.response_at(41).broker_epoch == 41


def test_broker_stays_fenced_until_its_metadata_offset_reaches_its_registration() -> None:
    h = Harness()
    epoch = h.register(1)
    resp = h.heartbeat(1, current_metadata_offset=epoch - 1)
    assert (resp.is_caught_up, resp.is_fenced) == (False, True)
    assert h.image.brokers.get(1).fenced  # type: ignore[union-attr]
    resp = h.heartbeat(1, current_metadata_offset=epoch)
    assert (resp.is_caught_up, resp.is_fenced) == (True, False)
    assert not h.image.brokers.get(1).fenced  # type: ignore[union-attr]


def test_heartbeat_with_stale_epoch_is_refused() -> None:
    h = cluster(1)
    with pytest.raises(StaleBrokerEpochError) as e:
        h.run(
            BrokerHeartbeat(
                broker_id=1, broker_epoch=h.epochs[1] + 1, current_metadata_offset=h.offset
            )
        )
    assert e.value.code == "STALE_BROKER_EPOCH"


def test_heartbeat_of_unknown_broker_is_refused() -> None:
    h = Harness()
    with pytest.raises(BrokerIdNotRegisteredError):
        h.run(BrokerHeartbeat(broker_id=7, broker_epoch=1, current_metadata_offset=0))


def test_second_incarnation_is_refused_while_the_first_has_a_live_session() -> None:
    h = cluster(1)
    h.now_ms = 8_999
    with pytest.raises(DuplicateBrokerRegistrationError):
        h.register(1, incarnation="other")
    h.now_ms = 9_000  # the session (last heartbeat at 0) expired
    h.register(1, incarnation="other")


def test_a_new_incarnation_naming_the_live_one_replaces_it_at_once() -> None:
    """It took the data directory the old one held (``previous_incarnation_id``): the old
    one is dead, so its session is not waited out and its leaderships move now."""
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    old_epoch = h.epochs[1]
    h.now_ms = 1_000  # the old incarnation's session has 8 s to run
    with pytest.raises(DuplicateBrokerRegistrationError):
        h.register(1, incarnation="i1", previous_incarnation_id="someone-else")
    h.register(1, incarnation="i1", previous_incarnation_id="i0")
    reg = h.part("t")
    assert reg.leader in (2, 3) and 1 not in reg.isr
    b = h.image.brokers.get(1)
    assert b is not None and b.incarnation_id == "i1" and b.fenced
    with pytest.raises(StaleBrokerEpochError):  # the old incarnation is fenced off
        h.run(
            BrokerHeartbeat(
                broker_id=BrokerId(1), broker_epoch=old_epoch, current_metadata_offset=0
            )
        )
    assert h.heartbeat(1).is_fenced is False  # caught up: back in service


def test_reregistration_takes_the_broker_out_of_isrs_and_leadership() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    new_epoch = h.register(1, incarnation="i0")  # same incarnation, restarted
    assert new_epoch > h.image.brokers.get(2).broker_epoch  # type: ignore[union-attr]
    reg = h.part("t")
    assert reg.leader == 2 and reg.isr == (2,) and reg.leader_epoch == 1


def test_session_expiry_fences_and_moves_leadership_within_the_isr() -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    h.now_ms = 5_000
    h.heartbeat_all(2, 3)
    records, deadline = h.poll(8_999)
    assert records == () and deadline == 9_000
    records, deadline = h.poll(9_000)
    assert h.image.brokers.get(1).fenced  # type: ignore[union-attr]
    reg = h.part("t")
    assert reg.leader == 2 and reg.isr == (2, 3)
    assert (reg.leader_epoch, reg.partition_epoch) == (1, 1)
    assert deadline == 14_000


def test_without_elr_fencing_the_last_isr_member_leaves_it_in_the_isr_without_leader() -> None:
    h = cluster(
        1, 2, config=ControllerConfig(noop_interval_ms=None, eligible_leader_replicas_enabled=False)
    )
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    alter(h, "t", 0, (1,))
    h.now_ms = 5_000
    h.heartbeat(2)
    h.poll(9_000)
    reg = h.part("t")
    assert reg.leader == NO_LEADER and reg.isr == (1,)
    # When broker 1 returns and catches up, it leads again: it holds every committed record.
    h.now_ms = 10_000
    epoch = h.register(1)
    h.heartbeat(1, current_metadata_offset=epoch)
    reg = h.part("t")
    assert reg.leader == 1 and reg.isr == (1,)
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_unclean_election_picks_a_live_replica_and_marks_recovering() -> None:
    h = cluster(1, 2)
    h.run(
        CreateTopic(
            name="t", assignments={0: (1, 2)}, configs={"unclean.leader.election.enable": "true"}
        )
    )
    alter(h, "t", 0, (1,))
    h.now_ms = 5_000
    h.heartbeat(2)
    h.poll(9_000)
    reg = h.part("t")
    assert reg.leader == 2 and reg.isr == (2,)
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_enabling_unclean_election_revives_offline_partitions() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    alter(h, "t", 0, (1,))
    h.now_ms = 5_000
    h.heartbeat(2)
    h.poll(9_000)
    assert h.part("t").leader == NO_LEADER
    h.run(
        AlterConfigs(
            resource_type=ConfigResourceType.TOPIC,
            resource_name="t",
            ops={"unclean.leader.election.enable": "true"},
        )
    )
    assert h.part("t").leader == 2


def test_want_fence_fences_at_once() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    resp = h.heartbeat(1, want_fence=True)
    assert resp.is_fenced and h.part("t").leader == 2


def test_controlled_shutdown_moves_leadership_then_fences() -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2), 1: (2, 1), 2: (1, 3)}))
    res = h.submit(
        BrokerHeartbeat(
            broker_id=1,
            broker_epoch=h.epochs[1],
            current_metadata_offset=h.offset,
            want_shutdown=True,
        )
    )
    kinds = [type(r).__name__ for r in res.records]
    assert kinds[0] == "BrokerRegistrationChangeRecord" and kinds[-1] == "FenceBrokerRecord"
    h.commit()
    assert res.response.should_shutdown
    assert h.image.topics.partitions_led_by(1) == []
    assert h.part("t", 0).leader == 2 and h.part("t", 0).isr == (2,)
    assert h.part("t", 1).isr == (2,)
    b = h.image.brokers.get(1)
    assert b is not None and b.in_controlled_shutdown and b.fenced


def test_controlled_shutdown_never_elects_uncleanly() -> None:
    h = cluster(1, 2)
    h.run(
        CreateTopic(
            name="t", assignments={0: (1, 2)}, configs={"unclean.leader.election.enable": "true"}
        )
    )
    alter(h, "t", 0, (1,))
    h.heartbeat(1, want_shutdown=True)
    reg = h.part("t")
    assert reg.leader == NO_LEADER and reg.isr == () and reg.elr == (1,)


def test_broker_in_controlled_shutdown_gets_no_new_replicas() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="keep", assignments={0: (2,)}))  # broker 2 keeps a leadership
    h.heartbeat(1, want_shutdown=True)
    with pytest.raises(InvalidReplicationFactorError):
        h.run(CreateTopic(name="t", replication_factor=2))


def test_unregister_broker_removes_it() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    h.run(UnregisterBroker(broker_id=1))
    assert h.image.brokers.get(1) is None
    assert h.part("t").leader == 2 and h.part("t").isr == (2,)
    with pytest.raises(BrokerIdNotRegisteredError):
        h.run(UnregisterBroker(broker_id=1))


# --------------------------------------------------------------------------- elections


def test_preferred_leader_is_restored_by_the_periodic_rebalance() -> None:
    h = Harness(ControllerConfig(noop_interval_ms=None, leader_imbalance_check_interval_ms=60_000))
    h.add_brokers(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    h.heartbeat(1, want_fence=True)
    assert h.part("t").leader == 2
    h.now_ms = 55_000
    h.heartbeat_all(1, 2)  # 1 is unfenced again, but not in the ISR yet: no election
    h.poll(60_000)
    assert h.part("t").leader == 2
    alter(h, "t", 0, (2, 1))  # broker 1 caught up and is back in the ISR
    h.now_ms = 115_000
    h.heartbeat_all(1, 2)
    h.poll(120_000)
    reg = h.part("t")
    assert reg.leader == 1 and reg.leader_epoch == 2


def test_elect_leaders_preferred() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    resp = h.run(ElectLeaders(partitions=(("t", 0),)))
    assert isinstance(resp.results[0].error, ElectionNotNeededError)
    h.heartbeat(1, want_fence=True)
    resp = h.run(ElectLeaders(partitions=(("t", 0),)))
    assert isinstance(resp.results[0].error, PreferredLeaderNotAvailableError)
    h.heartbeat(1)
    alter(h, "t", 0, (2, 1))
    resp = h.run(ElectLeaders(partitions=(("t", 0), ("nope", 0))))
    assert resp.results[0].leader == 1 or resp.results[1].leader == 1
    errors = {type(r.error).__name__ for r in resp.results}
    assert errors == {"NoneType", "UnknownTopicOrPartitionError"}


def test_elect_leaders_unclean_on_request() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    alter(h, "t", 0, (1,))
    h.heartbeat(1, want_fence=True)
    assert h.part("t").leader == NO_LEADER
    resp = h.run(ElectLeaders(election=ElectionType.UNCLEAN))
    assert resp.results[0].leader == 2
    assert h.part("t").leader_recovery_state == LeaderRecoveryState.RECOVERING


# --------------------------------------------------------------------------- AlterPartition


def test_alter_partition_shrinks_and_expands_the_isr() -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    r = alter(h, "t", 0, (1, 2))
    assert r.error is None and r.registration.isr == (1, 2)  # type: ignore[attr-defined]
    reg = h.part("t")
    assert reg.isr == (1, 2) and (reg.leader_epoch, reg.partition_epoch) == (0, 1)
    r = alter(h, "t", 0, (1, 2, 3), epochs={3: h.epochs[3]})
    assert r.error is None and h.part("t").isr == (1, 2, 3)  # type: ignore[attr-defined]
    assert h.part("t").partition_epoch == 2


def test_alter_partition_with_a_stale_leader_epoch_is_fenced() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    alter(h, "t", 0, (2, 1))
    h.run(ElectLeaders(partitions=(("t", 0),)))  # broker 1 leads again, leader epoch 2
    r = alter(h, "t", 0, (1,), leader_epoch=1)
    assert isinstance(r.error, FencedLeaderEpochError)  # type: ignore[attr-defined]
    assert r.error.code == "FENCED_LEADER_EPOCH"  # type: ignore[attr-defined]


def test_alter_partition_from_a_non_leader_is_refused() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    r = alter(h, "t", 0, (2,), sender=2)
    assert isinstance(r.error, NotLeaderOrFollowerError)  # type: ignore[attr-defined]


def test_alter_partition_with_a_stale_partition_epoch_is_refused() -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    alter(h, "t", 0, (1, 2))
    r = alter(h, "t", 0, (1,), partition_epoch=0)
    assert isinstance(r.error, InvalidUpdateVersionError)  # type: ignore[attr-defined]
    assert r.error.code == "INVALID_UPDATE_VERSION"  # type: ignore[attr-defined]


def test_alter_partition_from_the_future_means_we_are_not_the_controller() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    r = alter(h, "t", 0, (1,), leader_epoch=5)
    assert isinstance(r.error, NotControllerError)  # type: ignore[attr-defined]


@pytest.mark.parametrize("state", ["fenced", "shutdown", "stale_epoch", "unregistered"])
def test_alter_partition_refuses_ineligible_isr_members(state: str) -> None:
    h = cluster(1, 2, 3)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    alter(h, "t", 0, (1,))
    epochs = {}
    if state == "fenced":
        h.heartbeat(2, want_fence=True)
    elif state == "shutdown":
        h.run(CreateTopic(name="other", assignments={0: (2,)}))
        h.heartbeat(2, want_shutdown=True)
    elif state == "stale_epoch":
        epochs = {2: h.epochs[2] - 1}
    else:
        h.run(UnregisterBroker(broker_id=2))
    r = alter(h, "t", 0, (1, 2), epochs=epochs)
    assert isinstance(r.error, IneligibleReplicaError)  # type: ignore[attr-defined]
    assert r.error.code == "INELIGIBLE_REPLICA"  # type: ignore[attr-defined]
    assert h.part("t").isr == (1,)


@pytest.mark.parametrize("isr", [(), (1, 1), (1, 4), (2,)])
def test_alter_partition_refuses_malformed_isrs(isr: tuple[int, ...]) -> None:
    h = cluster(1, 2, 3, 4)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}))
    r = alter(h, "t", 0, isr)
    assert isinstance(r.error, InvalidRequestError)  # type: ignore[attr-defined]


def test_alter_partition_cannot_go_back_to_recovering() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    r = alter(h, "t", 0, (1,), recovery=LeaderRecoveryState.RECOVERING)
    assert isinstance(r.error, InvalidRequestError)  # type: ignore[attr-defined]


def test_alter_partition_from_stale_broker_epoch_is_refused_whole() -> None:
    h = cluster(1, 2)
    tid = h.create("t", 1, 1)
    with pytest.raises(StaleBrokerEpochError):
        h.run(
            AlterPartition(
                broker_id=1,
                broker_epoch=h.epochs[1] - 1,
                partitions=(
                    PartitionStateChange(
                        topic_id=tid,
                        partition=0,
                        leader_epoch=0,
                        partition_epoch=0,
                        new_isr=(IsrMember(1),),
                    ),
                ),
            )
        )


def test_alter_partition_errors_are_per_partition() -> None:
    h = cluster(1, 2)
    tid = h.create("t", 1, 1)
    leader = h.part("t").leader
    resp = h.run(
        AlterPartition(
            broker_id=leader,
            broker_epoch=h.epochs[leader],
            partitions=(
                PartitionStateChange(
                    topic_id=tid,
                    partition=0,
                    leader_epoch=0,
                    partition_epoch=0,
                    new_isr=(IsrMember(leader),),
                ),
                PartitionStateChange(
                    topic_id=tid,
                    partition=9,
                    leader_epoch=0,
                    partition_epoch=0,
                    new_isr=(IsrMember(leader),),
                ),
            ),
        )
    )
    assert resp.results[0].error is None
    assert isinstance(resp.results[1].error, UnknownTopicOrPartitionError)


def test_alter_partition_of_many_partitions_commits_the_accepted_ones_in_one_batch() -> None:
    """A broker sends every pending ISR change in one request (its AlterPartitionQueue,
    finding 13): each partition is checked on its own, the accepted changes become one
    batch of records (one Raft entry), and each partition gets its own answer, in order."""
    h = cluster(1, 2, 3)
    n = 200
    assignments = {p: (1, 2, 3) for p in range(n)}
    assignments[n - 1] = (2, 1, 3)  # led by broker 2
    h.run(CreateTopic(name="t", assignments=assignments))  # type: ignore[arg-type]
    tid = h.image.topics.by_name["t"]
    alter(h, "t", 1, (1, 2))  # partition 1 moves to partition epoch 1
    changes = [
        PartitionStateChange(
            topic_id=tid,
            partition=p,
            leader_epoch=0,
            partition_epoch=0,  # stale for partition 1
            new_isr=(IsrMember(1), IsrMember(3)),
        )
        for p in range(n)
    ]
    changes.append(dataclasses.replace(changes[0], partition=n))  # no such partition
    res = h.submit(AlterPartition(broker_id=1, broker_epoch=h.epochs[1], partitions=tuple(changes)))
    results = res.response.results
    assert [(r.topic_id, r.partition) for r in results] == [(tid, p) for p in range(n + 1)]
    assert isinstance(results[1].error, InvalidUpdateVersionError)
    assert isinstance(results[n - 1].error, NotLeaderOrFollowerError)
    assert isinstance(results[n].error, UnknownTopicOrPartitionError)
    accepted = [r for r in results if r.error is None]
    assert len(accepted) == n - 2
    assert all(r.registration.isr == (1, 3) for r in accepted)  # type: ignore[union-attr]
    # One ControllerResult: its records are proposed as one entry (ControllerDriver.handle).
    assert [type(r) for r in res.records] == [PartitionChangeRecord] * (n - 2)
    h.commit()
    assert h.part("t", 0).isr == (1, 3) and h.part("t", 1).isr == (1, 2)
    assert h.part("t", n - 1).isr == (2, 1, 3)


# --------------------------------------------------------------------------- producer ids, epochs


def test_producer_ids_are_handed_out_in_consecutive_blocks_of_1000() -> None:
    h = cluster(1, 2)
    a = h.run(AllocateProducerIds(broker_id=1, broker_epoch=h.epochs[1]))
    b = h.run(AllocateProducerIds(broker_id=2, broker_epoch=h.epochs[2]))
    assert (a.first_producer_id, a.size, b.first_producer_id) == (0, 1000, 1000)
    assert h.image.producer_ids.next_producer_id == 2000
    with pytest.raises(StaleBrokerEpochError):
        h.run(AllocateProducerIds(broker_id=1, broker_epoch=0))


def test_standby_controller_refuses_commands() -> None:
    ctl = QuorumController(1)
    with pytest.raises(NotControllerError) as e:
        ctl.handle(CreateTopic(name="t"), 0)
    assert e.value.code == "NOT_CONTROLLER"
    assert ctl.poll(0) == ((), None)


def test_commands_carrying_another_controller_epoch_are_refused() -> None:
    h = cluster(1)
    h.ctl.become_active(5, 0)
    with pytest.raises(StaleControllerEpochError):
        h.run(CreateTopic(name="t", controller_epoch=4))
    with pytest.raises(NotControllerError):
        h.run(CreateTopic(name="t", controller_epoch=6))
    h.run(CreateTopic(name="t", controller_epoch=5))


def test_becoming_standby_forgets_pending_records() -> None:
    h = cluster(1)
    h.submit(CreateTopic(name="t"))
    h.ctl.become_standby()
    assert h.ctl.pending_records == 0 and h.ctl.latest_image.topics.get("t") is None
    with pytest.raises(NotControllerError):
        h.submit(CreateTopic(name="u"))


def test_a_foreign_committed_record_drops_the_pending_view() -> None:
    h = cluster(1)
    h.submit(CreateTopic(name="t"))
    h.in_flight.clear()  # lost by Raft; someone else's record commits instead
    h.ctl.replay(TopicRecord(name="x", topic_id="X" * 22), h.offset + 1)
    assert h.ctl.pending_records == 0
    assert h.ctl.latest_image.topics.get("t") is None


def test_new_controller_gives_every_broker_a_fresh_session() -> None:
    h = cluster(1)
    h.ctl.become_standby()
    h.ctl.become_active(2, 20_000)  # failover at t=20s; broker 1 last heard at t=0
    records, deadline = h.ctl.poll(20_000)
    assert records == () and deadline == 29_000
    records, _ = h.ctl.poll(29_000)
    assert any(type(r).__name__ == "FenceBrokerRecord" for r in records)


def test_noop_records_are_written_on_their_interval() -> None:
    h = Harness(ControllerConfig(noop_interval_ms=500, leader_imbalance_check_interval_ms=None))
    records, deadline = h.poll(499)
    assert records == () and deadline == 500
    records, deadline = h.poll(500)
    assert records == (NoOpRecord(),) and deadline == 1000


def test_replay_builds_the_same_image_on_a_standby() -> None:
    h = Harness()
    standby = QuorumController(9)
    log: list[object] = []
    orig = h.ctl.replay

    def tee(record: object, offset: int, epoch: int | None = None) -> None:
        log.append((record, offset, epoch))
        orig(record, offset, epoch)  # type: ignore[arg-type]

    h.ctl.replay = tee  # type: ignore[method-assign]
    h.add_brokers(1, 2, 3)
    h.create("t", 6, 3)
    h.heartbeat(2, want_fence=True)
    h.ctl.replay = orig  # type: ignore[method-assign]
    for rec, off, ep in log:
        standby.replay(rec, off, ep)  # type: ignore[arg-type]
    assert standby.image == h.image != MetadataImage.EMPTY


def test_partition_change_record_only_when_something_changes() -> None:
    h = cluster(1, 2)
    h.run(CreateTopic(name="t", assignments={0: (1, 2)}))
    res = h.submit(
        AlterPartition(
            broker_id=1,
            broker_epoch=h.epochs[1],
            partitions=(
                PartitionStateChange(
                    topic_id=h.image.topics.by_name["t"],
                    partition=0,
                    leader_epoch=0,
                    partition_epoch=0,
                    new_isr=(IsrMember(1), IsrMember(2)),
                ),
            ),
        )
    )
    assert res.records == ()
    assert not any(isinstance(r, PartitionChangeRecord) for r in res.records)


def test_records_that_went_through_the_codec_still_match_the_pending_ones() -> None:
    # The Raft shell replays records decoded from the log, not the objects it proposed; a
    # mismatch would make the controller drop its pending view.
    h = Harness()
    for b in (1, 2):
        h.ctl.handle(
            RegisterBroker(broker_id=b, incarnation_id="a", endpoints=[["http", "h", b]], rack="r"),
            0,
        )  # type: ignore[list-item]
    pending = list(h.ctl._pending)
    h.offset += 1
    h.ctl.replay(decode_record(encode_record(pending[0])), h.offset)
    assert h.ctl.pending_records == 1
    h.offset += 1
    h.ctl.replay(decode_record(encode_record(pending[1])), h.offset)
    h.epochs.update({1: h.offset - 1, 2: h.offset})
    h.heartbeat_all(1, 2)
    res = [
        h.ctl.handle(c, 0)
        for c in (
            CreateTopic(
                name="t",
                num_partitions=3,
                replication_factor=2,
                configs={"cleanup.policy": "compact"},
            ),
            AlterConfigs(
                resource_type=ConfigResourceType.TOPIC, resource_name="t", ops={"retention.ms": "1"}
            ),
            BrokerHeartbeat(
                broker_id=1, broker_epoch=h.epochs[1], current_metadata_offset=0, want_shutdown=True
            ),
        )
    ]
    records = [r for x in res for r in x.records]
    for i, rec in enumerate(records):
        h.offset += 1
        h.ctl.replay(decode_record(encode_record(rec)), h.offset)
        assert h.ctl.pending_records == len(records) - i - 1


def test_partition_counts_are_bounded_per_topic_and_across_the_cluster() -> None:
    h = Harness(
        ControllerConfig(noop_interval_ms=None, max_partitions_per_topic=8, max_partitions=10)
    )
    h.add_brokers(1)
    with pytest.raises(InvalidPartitionsError, match=r"1\.\.8"):
        h.run(CreateTopic(name="wide", assignments={p: (1,) for p in range(9)}))  # type: ignore[misc]
    h.run(CreateTopic(name="a", num_partitions=6))
    h.commit()
    with pytest.raises(InvalidPartitionsError, match="has 6 partitions and allows at most 10"):
        h.run(CreateTopic(name="b", num_partitions=5))
    h.run(CreateTopic(name="b", num_partitions=4))  # exactly at the bound
    h.commit()
    with pytest.raises(InvalidPartitionsError, match="cannot add 1"):
        h.run(CreatePartitions(name="a", total_count=7))
    assert sum(len(t.partitions) for t in h.ctl.image.topics.by_id.values()) == 10
