"""ACLs and SCRAM credentials in the metadata log (issue 18): the controller commands, their
refusals (nothing proposed), replay into the image, and snapshots carrying both."""

from __future__ import annotations

import dataclasses

import pytest

from metalog.commands import (
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    ScramDeletion,
    ScramUpsertion,
)
from metalog.controller import acl_id
from metalog.delta import MetadataDelta, decode_snapshot, encode_snapshot
from metalog.errors import (
    DuplicateResourceError,
    InvalidRequestError,
    MetadataError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from metalog.image import MetadataImage
from metalog.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from metalog.security import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    ScramCredential,
    authorize,
)
from tests.unit.metalog.metalog_harness import Harness

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def acl(
    principal: str = "User:alice",
    rtype: ResourceType = T,
    name: str = "orders",
    pattern: PatternType = PatternType.LITERAL,
    op: Operation = Operation.READ,
    perm: Permission = Permission.ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(principal, host, rtype, name, pattern, op, perm)


def upsertion(name: str = "alice", password: str = "pw", mechanism: str = "SCRAM-SHA-256"):
    c = ScramCredential.derive(mechanism, password, b"salt-" + name.encode(), 4096)
    return ScramUpsertion(name, mechanism, c.salt, c.iterations, c.stored_key, c.server_key)


def test_created_acls_reach_the_image_and_decide_there() -> None:
    h = Harness()
    resp = h.run(CreateAcls(bindings=(acl(), acl(op=Operation.WRITE, perm=Permission.DENY))))
    assert [e.binding for e in resp.entries] == [
        acl(),
        acl(op=Operation.WRITE, perm=Permission.DENY),
    ]
    assert len(h.image.acls) == 2
    bindings = h.image.acls.for_type(T)
    assert authorize(bindings, "User:alice", "10.0.0.1", Operation.READ, T, "orders")
    assert not authorize(bindings, "User:alice", "10.0.0.1", Operation.WRITE, T, "orders")
    assert not authorize(bindings, "User:bob", "10.0.0.1", Operation.READ, T, "orders")


def test_creating_a_binding_twice_adds_one_record() -> None:
    h = Harness()
    first = h.run(CreateAcls(bindings=(acl(),)))
    res = h.ctl.handle(CreateAcls(bindings=(acl(),)), h.now_ms)
    assert res.records == ()
    assert res.response.entries == first.entries
    # ... and twice in one request, once.
    res = h.ctl.handle(CreateAcls(bindings=(acl(name="x"), acl(name="x"))), h.now_ms)
    assert len(res.records) == 1


@pytest.mark.parametrize(
    "bad",
    [
        acl(principal=""),
        acl(principal="alice"),
        acl(principal="Group:x"),
        acl(principal="User:"),
        acl(host=""),
        acl(name=""),
        acl(name="*", pattern=PatternType.PREFIXED),
        acl(rtype=C, name="not-the-cluster", op=Operation.ALTER),
        acl(rtype=C, name="kafka-cluster", pattern=PatternType.PREFIXED, op=Operation.ALTER),
        acl(rtype=G, op=Operation.WRITE),  # groups have no WRITE
        acl(rtype=ResourceType.TRANSACTIONAL_ID, op=Operation.READ),
        acl(op="READX"),  # type: ignore[arg-type]
        acl(perm="ANY"),  # type: ignore[arg-type]
        acl(pattern="MATCH"),  # type: ignore[arg-type]
    ],
    ids=repr,
)
def test_an_invalid_binding_refuses_the_whole_request(bad: AclBinding) -> None:
    h = Harness()
    with pytest.raises(InvalidRequestError):
        h.ctl.handle(CreateAcls(bindings=(acl(name="fine"), bad)), h.now_ms)
    assert h.ctl.pending_records == 0
    assert len(h.ctl.latest_image.acls) == 0


def test_empty_create_and_delete_are_refused() -> None:
    h = Harness()
    with pytest.raises(InvalidRequestError):
        h.ctl.handle(CreateAcls(bindings=()), h.now_ms)
    with pytest.raises(InvalidRequestError):
        h.ctl.handle(DeleteAcls(filters=()), h.now_ms)
    with pytest.raises(InvalidRequestError):
        h.ctl.handle(DeleteAcls(filters=(AclBindingFilter(pattern_type="SOME"),)), h.now_ms)


def test_delete_by_filter_removes_what_matches_and_returns_it() -> None:
    h = Harness()
    keep = acl(principal="User:bob")
    prefixed = acl(name="ord", pattern=PatternType.PREFIXED, op=Operation.WRITE)
    wildcard = acl(name="*", op=Operation.DESCRIBE)
    h.run(CreateAcls(bindings=(acl(), keep, prefixed, wildcard, acl(rtype=G, name="orders"))))
    # MATCH on topic "orders" for alice: the literal, the prefix "ord" and the literal '*'.
    flt = AclBindingFilter(
        principal="User:alice", resource_type=T, resource_name="orders", pattern_type="MATCH"
    )
    resp = h.run(DeleteAcls(filters=(flt,)))
    assert {e.binding for e in resp.deleted} == {acl(), prefixed, wildcard}
    assert {a for a in h.image.acls.by_id.values()} == {keep, acl(rtype=G, name="orders")}
    # A filter that matches nothing deletes nothing and proposes no record.
    res = h.ctl.handle(DeleteAcls(filters=(AclBindingFilter(principal="User:zed"),)), h.now_ms)
    assert res.records == () and res.response.deleted == ()
    # The all-ANY filter deletes everything.
    resp = h.run(DeleteAcls(filters=(AclBindingFilter(),)))
    assert len(resp.deleted) == 2 and len(h.image.acls) == 0


@pytest.mark.parametrize(
    ("flt", "hits"),
    [
        (AclBindingFilter(resource_name="ord", pattern_type="ANY"), {"prefixed"}),
        (AclBindingFilter(resource_name="ord", pattern_type="LITERAL"), set()),
        (AclBindingFilter(resource_name="ord", pattern_type="PREFIXED"), {"prefixed"}),
        (AclBindingFilter(resource_name="orders", pattern_type="ANY"), {"literal"}),
        (
            AclBindingFilter(resource_name="orders", pattern_type="MATCH"),
            {"literal", "prefixed", "wildcard"},
        ),
        (AclBindingFilter(resource_name="x", pattern_type="MATCH"), {"wildcard"}),
        (AclBindingFilter(operation=Operation.ALL), set()),  # ALL matches only ALL
        (AclBindingFilter(permission=Permission.DENY), {"deny"}),
        (AclBindingFilter(host="10.0.0.1"), {"deny"}),
    ],
)
def test_filters_match_as_kafkas_acl_binding_filter(flt: AclBindingFilter, hits: set[str]) -> None:
    named = {
        "literal": acl(),
        "prefixed": acl(name="ord", pattern=PatternType.PREFIXED),
        "wildcard": acl(name="*"),
        "deny": acl(name="z", perm=Permission.DENY, host="10.0.0.1"),
    }
    assert {n for n, a in named.items() if flt.matches(a)} == hits


def test_scram_upsert_replaces_and_delete_removes() -> None:
    h = Harness()
    h.run(AlterUserScramCredentials(upsertions=(upsertion(), upsertion("bob"))))
    cred = h.image.scram.get("alice", "SCRAM-SHA-256")
    assert cred is not None and cred.verify("pw") and not cred.verify("other")
    h.run(AlterUserScramCredentials(upsertions=(upsertion(password="new"),)))
    cred = h.image.scram.get("alice", "SCRAM-SHA-256")
    assert cred is not None and cred.verify("new") and not cred.verify("pw")
    resp = h.run(AlterUserScramCredentials(deletions=(ScramDeletion("alice", "SCRAM-SHA-256"),)))
    assert resp.deleted == (("alice", "SCRAM-SHA-256"),)
    assert h.image.scram.get("alice", "SCRAM-SHA-256") is None
    assert list(h.image.scram.users()) == ["bob"]


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (AlterUserScramCredentials(), InvalidRequestError),
        (
            AlterUserScramCredentials(
                upsertions=(dataclasses.replace(upsertion(), mechanism="SCRAM-SHA-1"),)
            ),
            UnsupportedSaslMechanismError,
        ),
        (
            AlterUserScramCredentials(
                upsertions=(dataclasses.replace(upsertion(), iterations=4095),)
            ),
            UnacceptableCredentialError,
        ),
        (
            AlterUserScramCredentials(
                upsertions=(dataclasses.replace(upsertion(), iterations=16_385),)
            ),
            UnacceptableCredentialError,
        ),
        (
            AlterUserScramCredentials(upsertions=(dataclasses.replace(upsertion(), salt=b""),)),
            UnacceptableCredentialError,
        ),
        (
            AlterUserScramCredentials(
                upsertions=(dataclasses.replace(upsertion(), stored_key=b"short"),)
            ),
            UnacceptableCredentialError,
        ),
        (
            AlterUserScramCredentials(upsertions=(dataclasses.replace(upsertion(), name=""),)),
            UnacceptableCredentialError,
        ),
        (
            AlterUserScramCredentials(
                upsertions=(upsertion(),), deletions=(ScramDeletion("alice", "SCRAM-SHA-256"),)
            ),
            DuplicateResourceError,
        ),
        (
            AlterUserScramCredentials(deletions=(ScramDeletion("nobody", "SCRAM-SHA-256"),)),
            ResourceNotFoundError,
        ),
        (
            AlterUserScramCredentials(deletions=(ScramDeletion("alice", "PLAIN"),)),
            UnsupportedSaslMechanismError,
        ),
    ],
)
def test_a_bad_scram_change_refuses_the_whole_request(
    command: AlterUserScramCredentials, error: type[MetadataError]
) -> None:
    h = Harness()
    h.run(AlterUserScramCredentials(upsertions=(upsertion("carol"),)))
    good = upsertion("dave")
    bad = dataclasses.replace(command, upsertions=(good, *command.upsertions))
    if not command.upsertions and not command.deletions:
        bad = command
    with pytest.raises(error):
        h.ctl.handle(bad, h.now_ms)
    assert h.ctl.pending_records == 0
    assert h.ctl.latest_image.scram.get("dave", "SCRAM-SHA-256") is None


def test_snapshots_carry_acls_and_credentials() -> None:
    h = Harness()
    h.run(CreateAcls(bindings=(acl(), acl(rtype=C, name="kafka-cluster", op=Operation.ALTER))))
    h.run(AlterUserScramCredentials(upsertions=(upsertion(), upsertion(mechanism="SCRAM-SHA-512"))))
    image = decode_snapshot(encode_snapshot(h.image))
    assert image == h.image
    assert image.acls.by_id == h.image.acls.by_id
    assert image.acls.for_type(C) == h.image.acls.for_type(C) != ()
    cred = image.scram.get("alice", "SCRAM-SHA-512")
    assert cred is not None and cred.verify("pw")


def test_replay_refuses_a_duplicate_id_and_the_removal_of_an_unknown_one() -> None:
    from common.invariant import InvariantError

    r = AccessControlEntryRecord(
        id=acl_id(acl()),
        resource_type=T,
        resource_name="orders",
        pattern_type=PatternType.LITERAL,
        principal="User:alice",
        host="*",
        operation=Operation.READ,
        permission=Permission.ALLOW,
    )
    d = MetadataDelta(MetadataImage.EMPTY)
    d.replay(r, 1)
    with pytest.raises(InvariantError):
        d.replay(r, 2)
    with pytest.raises(InvariantError):
        d.replay(RemoveAccessControlEntryRecord(id="nope"), 3)


def test_the_id_is_a_function_of_the_binding() -> None:
    assert acl_id(acl()) == acl_id(acl())
    assert acl_id(acl()) != acl_id(acl(op=Operation.WRITE))
    assert len(acl_id(acl())) == 22
