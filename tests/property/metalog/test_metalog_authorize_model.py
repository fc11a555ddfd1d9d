"""``metalog.security.authorize`` against a small reference model written from Kafka's rules
(``StandardAuthorizerData``), not from the code under test.

The model states each rule on its own: super users pass; the bindings that concern the
resource are those of its type whose LITERAL name is the resource's or ``*`` and whose
PREFIXED name starts it; none at all -> ``allow_if_no_acl``; of those, the ones for the
principal (or ``User:*``) from the host (or ``*``) decide: a DENY of the operation or of ALL
denies; otherwise the operation is allowed if some ALLOW grants it, where an ALLOW grants its
own operation plus what it implies, written the forward way round (READ grants DESCRIBE, ...,
ALL grants everything; the code keeps the reverse table).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metalog.image import AclsImage, PMap
from metalog.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)

O = Operation  # noqa: E741 (short: the tables below are read as Kafka's)
GRANTS: dict[Operation, set[Operation]] = {
    O.ALL: set(Operation),
    O.READ: {O.READ, O.DESCRIBE},
    O.WRITE: {O.WRITE, O.DESCRIBE},
    O.DELETE: {O.DELETE, O.DESCRIBE},
    O.ALTER: {O.ALTER, O.DESCRIBE},
    O.ALTER_CONFIGS: {O.ALTER_CONFIGS, O.DESCRIBE_CONFIGS},
}


def model(
    acls: list[AclBinding],
    principal: str,
    host: str,
    op: Operation,
    rtype: ResourceType,
    name: str,
    super_users: frozenset[str],
    allow_if_no_acl: bool,
) -> bool:
    if principal in super_users:
        return True

    def concerns_resource(a: AclBinding) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == PatternType.LITERAL:
            return a.resource_name == name or a.resource_name == "*"
        return name[: len(a.resource_name)] == a.resource_name

    on_resource = [a for a in acls if concerns_resource(a)]
    if not on_resource:
        return allow_if_no_acl
    mine = [
        a for a in on_resource if a.principal in (principal, "User:*") and a.host in (host, "*")
    ]
    denied = {a.operation for a in mine if a.permission == Permission.DENY}
    if O.ALL in denied or op in denied:
        return False
    granted: set[Operation] = set()
    for a in mine:
        if a.permission == Permission.ALLOW:
            granted |= GRANTS.get(a.operation, {a.operation})
    return op in granted


# Few values per field, so that drawn bindings often concern the drawn request.
names = st.sampled_from(["a", "ab", "b", "*"])
bindings = st.builds(
    AclBinding,
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["*", "h1", "h2"]),
    resource_type=st.sampled_from([ResourceType.TOPIC, ResourceType.TOPIC, ResourceType.GROUP]),
    resource_name=names,
    pattern_type=st.sampled_from(PatternType),
    operation=st.sampled_from(Operation),
    permission=st.sampled_from(Permission),
)
requests = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:root"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from([o for o in Operation if o is not O.ALL]),  # a request names one operation
    st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    st.sampled_from(["a", "ab", "b", "c"]),
)
super_users = st.sampled_from([frozenset(), frozenset({"User:root"}), frozenset({"User:alice"})])


@settings(max_examples=2_000)
@given(st.lists(bindings, max_size=12), requests, super_users, st.booleans())
def test_authorize_agrees_with_the_reference_model(
    acls: list[AclBinding],
    request: tuple[str, str, Operation, ResourceType, str],
    supers: frozenset[str],
    allow_if_no_acl: bool,
) -> None:
    principal, host, op, rtype, name = request
    expected = model(acls, principal, host, op, rtype, name, supers, allow_if_no_acl)
    got = authorize(
        acls,
        principal,
        host,
        op,
        rtype,
        name,
        super_users=supers,
        allow_if_no_acl=allow_if_no_acl,
    )
    assert got == expected


@settings(max_examples=1_000)
@given(st.lists(bindings, max_size=12), requests, super_users, st.booleans())
def test_a_decision_on_the_images_index_agrees_with_the_model(
    acls: list[AclBinding],
    request: tuple[str, str, Operation, ResourceType, str],
    supers: frozenset[str],
    allow_if_no_acl: bool,
) -> None:
    # What a node decides with: only the bindings AclsImage.on_resource picks for the
    # resource (its literal name, '*', the prefixes it starts with), not all of the type.
    principal, host, op, rtype, name = request
    image = AclsImage.of(PMap({f"{i:04}": a for i, a in enumerate(acls)}))
    picked = image.on_resource(rtype, name)
    assert sorted(map(repr, picked)) == sorted(
        repr(a) for a in image.for_type(rtype) if a.matches_resource(rtype, name)
    )
    expected = model(acls, principal, host, op, rtype, name, supers, allow_if_no_acl)
    got = authorize(
        picked,
        principal,
        host,
        op,
        rtype,
        name,
        super_users=supers,
        allow_if_no_acl=allow_if_no_acl,
    )
    assert got == expected


@given(st.lists(bindings, max_size=8), requests, st.booleans(), st.data())
def test_a_matching_deny_wins_over_any_allow(
    acls: list[AclBinding],
    request: tuple[str, str, Operation, ResourceType, str],
    allow_if_no_acl: bool,
    data: st.DataObject,
) -> None:
    principal, host, op, rtype, name = request
    # Every pattern that concerns the resource: its name, '*', or a prefix of it.
    deny_name, prefixed = data.draw(
        st.sampled_from([(name, False), ("*", False), (name, True), (name[:1], True)])
    )
    deny = AclBinding(
        principal=data.draw(st.sampled_from([principal, "User:*"])),
        host=data.draw(st.sampled_from([host, "*"])),
        resource_type=rtype,
        resource_name=deny_name,
        pattern_type=PatternType.PREFIXED if prefixed else PatternType.LITERAL,
        operation=data.draw(st.sampled_from([op, O.ALL])),
        permission=Permission.DENY,
    )
    allow_all = AclBinding(
        principal, host, rtype, name, PatternType.LITERAL, O.ALL, Permission.ALLOW
    )
    everything = [*acls, deny, allow_all]
    assert not authorize(
        everything, principal, host, op, rtype, name, allow_if_no_acl=allow_if_no_acl
    )


@given(st.lists(bindings, max_size=8), requests, st.randoms(use_true_random=False))
def test_the_order_of_the_bindings_does_not_matter(
    acls: list[AclBinding], request: tuple[str, str, Operation, ResourceType, str], rnd: object
) -> None:
    shuffled = list(acls)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert authorize(acls, *request) == authorize(shuffled, *request)


def _b(op: Operation, perm: Permission, name: str = "a", pattern: str = "LITERAL") -> AclBinding:
    return AclBinding("User:alice", "*", ResourceType.TOPIC, name, PatternType(pattern), op, perm)


ALLOW, DENY = Permission.ALLOW, Permission.DENY


# Rules a random draw reaches only now and then, pinned by name.
RULES = [
    ("deny READ does not deny DESCRIBE", [_b(O.READ, ALLOW), _b(O.READ, DENY)], O.DESCRIBE, True),
    ("allow READ implies DESCRIBE", [_b(O.READ, ALLOW)], O.DESCRIBE, True),
    ("allow DESCRIBE does not imply READ", [_b(O.DESCRIBE, ALLOW)], O.READ, False),
    (
        "allow ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [_b(O.ALTER_CONFIGS, ALLOW)],
        O.DESCRIBE_CONFIGS,
        True,
    ),
    ("deny ALL wins over allow ALL", [_b(O.ALL, ALLOW), _b(O.ALL, DENY)], O.WRITE, False),
    (
        "a prefixed deny wins",
        [_b(O.WRITE, ALLOW), _b(O.WRITE, DENY, "", "PREFIXED")],
        O.WRITE,
        False,
    ),
    ("a prefix is not a literal", [_b(O.WRITE, ALLOW, "ab")], O.WRITE, False),
]


def test_named_rules() -> None:
    for what, acls, op, expected in RULES:
        assert authorize(acls, "User:alice", "h1", op, ResourceType.TOPIC, "a") is expected, what
        assert (
            model(acls, "User:alice", "h1", op, ResourceType.TOPIC, "a", frozenset(), False)
            is expected
        ), what
