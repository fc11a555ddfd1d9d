"""ControllerDriver, the glue the service and the simulator share: committed entries to
replayed records with dense offsets, commands to entries and responses, activation and
standby, and the refusal of records that cannot be encoded (hardening issue 17)."""

from __future__ import annotations

import pytest

from metalog.commands import BrokerHeartbeat, LookupTopic, RegisterBroker
from metalog.controller import ControllerConfig, QuorumController
from metalog.delta import encode_snapshot
from metalog.driver import ControllerDriver, Proposal
from metalog.errors import InvalidRequestError
from metalog.records import (
    BrokerEpoch,
    BrokerId,
    Endpoint,
    NoOpRecord,
    TopicId,
    TopicRecord,
    encode_records,
)
from metalog.responses import LookupTopicResponse
from raft.types import Entry, EntryKind, LogIndex, Term

TERM = 3


def entry(index: int, data: bytes = b"", kind: EntryKind = EntryKind.NORMAL) -> Entry:
    return Entry(LogIndex(index), Term(TERM), kind, data)


def new_driver(**config: int | None) -> ControllerDriver:
    config.setdefault("noop_interval_ms", None)
    config.setdefault("leader_imbalance_check_interval_ms", None)
    return ControllerDriver(QuorumController(1, ControllerConfig(**config)))  # type: ignore[arg-type]


def active_driver(**config: int | None) -> ControllerDriver:
    d = new_driver(**config)
    d.apply_entry(entry(1))  # the term's no-op
    assert d.tick(0, is_leader=True, term=TERM).activate_term == TERM
    d.on_read_index(TERM, 1, 1)
    assert d.maybe_activate(0, is_leader=True, term=TERM)
    return d


def commit(d: ControllerDriver, p: Proposal, index: int) -> object:
    assert p.data is not None
    d.apply_entry(entry(index, p.data))
    return d.response(p, index)


def register(broker_id: int, incarnation_id: object = "i0") -> RegisterBroker:
    return RegisterBroker(
        broker_id=BrokerId(broker_id),
        incarnation_id=incarnation_id,  # type: ignore[arg-type]
        endpoints=(Endpoint("http", "127.0.0.1", 9000 + broker_id),),
    )


# --------------------------------------------------------------------------- log side


def test_records_are_numbered_densely_across_entries_and_empty_entries_take_no_offset() -> None:
    d = new_driver()
    two = encode_records([TopicRecord(name="a", topic_id=TopicId("A")), NoOpRecord()])
    got = d.apply_entry(entry(1, two))
    assert got is not None and (got.base_offset, got.index, got.term) == (0, 1, TERM)
    assert d.apply_entry(entry(2)) is None  # the leader's no-op entry
    assert d.apply_entry(entry(3, b"conf", EntryKind.CONF_CHANGE)) is None
    got = d.apply_entry(entry(4, encode_records([NoOpRecord()])))
    assert got is not None and got.base_offset == 2
    assert (d.next_offset, d.metadata_offset, d.applied_index) == (3, 2, 4)
    assert d.controller.image.offset == 2 and d.controller.image.topics.get("a") is not None
    assert d.records_since_snapshot == 3


def test_restore_starts_over_from_the_snapshot() -> None:
    d = new_driver()
    d.apply_entry(entry(1, encode_records([TopicRecord(name="a", topic_id=TopicId("A"))])))
    data = encode_snapshot(d.controller.image)
    other = new_driver()
    other.apply_entry(entry(1, encode_records([NoOpRecord(), NoOpRecord()])))
    image = other.restore(7, data)
    assert image.topics.get("a") is not None
    assert (other.next_offset, other.applied_index, other.records_since_snapshot) == (1, 7, 0)


def test_snapshot_is_due_once_per_records_max() -> None:
    d = new_driver()
    d.apply_entry(entry(1, encode_records([NoOpRecord()] * 3)))
    assert not d.snapshot_due(4)
    assert d.snapshot_due(3)
    assert not d.snapshot_due(3)


# --------------------------------------------------------------------------- commands


def test_a_registration_is_answered_with_the_offset_its_record_committed_at() -> None:
    d = active_driver()
    d.apply_entry(entry(2, encode_records([NoOpRecord()] * 5)))  # offsets 0..4
    p = d.handle(register(7), 0)
    assert p.data is not None and p.result.response.broker_epoch == -1
    resp = commit(d, p, 3)
    assert resp.broker_epoch == 5  # type: ignore[attr-defined]
    assert d.controller.image.brokers.get(BrokerId(7)).broker_epoch == 5  # type: ignore[union-attr]


def test_a_command_without_records_is_answered_at_once() -> None:
    d = active_driver()
    d.apply_entry(entry(2, encode_records([TopicRecord(name="t", topic_id=TopicId("T"))])))
    p = d.handle(LookupTopic(name="t"), 0)
    assert p.data is None and p.result.response == LookupTopicResponse("t", TopicId("T"))


def test_a_record_that_cannot_be_encoded_is_refused_and_never_pending() -> None:
    """Issue 17: a RegisterBrokerRecord with an int incarnation id used to be proposed and
    committed, and then every voter failed to decode it."""
    d = active_driver()
    with pytest.raises(InvalidRequestError, match=r"incarnation_id: expected str, got 12345"):
        d.handle(register(7, incarnation_id=12345), 0)
    assert d.controller.pending_records == 0
    assert d.controller.latest_image.brokers.get(BrokerId(7)) is None
    # The controller goes on: the next command is decided on an image without the refused one.
    p = d.handle(register(7), 0)
    assert p.data is not None and d.controller.pending_records == 1
    assert commit(d, p, 2).broker_epoch == 0  # type: ignore[attr-defined]
    assert d.controller.pending_records == 0


# --------------------------------------------------------------------------- role


def test_activation_waits_for_the_barrier_and_the_whole_log_to_be_applied() -> None:
    d = new_driver()
    assert d.tick(0, is_leader=True, term=TERM).activate_term == TERM
    assert d.tick(100, is_leader=True, term=TERM).activate_term is None  # under way
    assert not d.serving(True, TERM)
    assert d.on_read_index(TERM, read_index=2, last_index=4) == 4
    d.apply_entry(entry(1))
    d.apply_entry(entry(2))
    assert not d.maybe_activate(200, is_leader=True, term=TERM)  # entries 3 and 4 not applied
    d.apply_entry(entry(3))
    d.apply_entry(entry(4))
    assert d.maybe_activate(200, is_leader=True, term=TERM)
    assert d.serving(True, TERM) and d.controller.controller_epoch == TERM
    assert d.activating_term is None


def test_an_activation_completing_after_leadership_moved_on_does_not_activate() -> None:
    d = new_driver()
    d.tick(0, is_leader=True, term=TERM)
    d.on_read_index(TERM, 0, 0)
    assert not d.maybe_activate(0, is_leader=True, term=TERM + 2)
    assert not d.controller.is_active
    assert d.tick(0, is_leader=True, term=TERM + 2).activate_term == TERM + 2


def test_a_barrier_of_an_older_activation_does_not_complete_the_current_one() -> None:
    d = new_driver()
    d.tick(0, is_leader=True, term=TERM)
    d.tick(0, is_leader=True, term=TERM + 1)  # a newer term started its own activation
    d.on_read_index(TERM, 0, 0)
    assert not d.maybe_activate(0, is_leader=True, term=TERM + 1)
    d.abandon_activation(TERM)  # the older one ending leaves the newer one under way
    assert d.activating_term == TERM + 1


def test_a_controller_that_lost_leadership_or_leads_a_newer_term_stands_by() -> None:
    d = active_driver()
    assert d.tick(0, is_leader=True, term=TERM).stood_by_from is None
    t = d.tick(0, is_leader=True, term=TERM + 2)
    assert t.stood_by_from == TERM and t.activate_term == TERM + 2
    assert not d.controller.is_active
    d = active_driver()
    assert d.tick(0, is_leader=False, term=TERM).stood_by_from == TERM
    assert not d.serving(False, TERM)


def test_a_failed_proposal_makes_the_controller_stand_by() -> None:
    d = active_driver()
    d.handle(register(7), 0)
    d.on_proposal_failed()
    assert not d.controller.is_active and d.controller.pending_records == 0


def test_tick_proposes_what_poll_decides() -> None:
    d = active_driver(session_timeout_ms=9_000)
    p = d.handle(register(7), 0)
    epoch = commit(d, p, 2).broker_epoch  # type: ignore[attr-defined]
    d.handle(
        BrokerHeartbeat(
            broker_id=BrokerId(7), broker_epoch=BrokerEpoch(epoch), current_metadata_offset=0
        ),
        0,
    )
    t = d.tick(20_000, is_leader=True, term=TERM)  # the session expired: fence it
    assert [type(r).__name__ for r in t.records] == ["FenceBrokerRecord"]
    assert t.data == encode_records(list(t.records))
