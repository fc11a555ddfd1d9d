"""``longboat acls add|list|remove``: ACL administration with ``kafka-acls``' flags (issue 18).

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and
``--cluster``, with ``--resource-pattern-type`` (``literal`` by default; ``prefixed``; and for
``list``/``remove`` also ``match`` and ``any``, Kafka's filter types). Who:
``--allow-principal``/``--deny-principal`` (``User:name``, repeatable), from
``--allow-host``/``--deny-host`` (``*`` when none is given). What: ``--operation``
(repeatable; ``add`` defaults to ``All``), or the shortcuts ``kafka-acls`` expands:

* ``--producer``: WRITE, DESCRIBE and CREATE on the topics (plus WRITE and DESCRIBE on the
  transactional ids, and with ``--idempotent`` IDEMPOTENT_WRITE on the cluster);
* ``--consumer``: READ and DESCRIBE on the topics, READ on the groups (``--group`` needed).

``list`` shows every binding, or those of the named resources (``--principal`` narrows it to
principals). ``remove`` deletes the bindings of the named resources, narrowed by principal,
host and operation when given (an operation not given is any operation; ``kafka-acls``
would mean ``All``), after asking unless ``--force``/``--yes``. Everything goes through one
broker's HTTP API (``api.client.admin.Admin``); ``--json`` prints the bindings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from api.cli.common import (
    AdminError,
    bootstrap_option,
    client_security,
    confirm_unless_yes,
    emit_json,
    json_option,
    main,
    print_table,
    resolve_bootstrap,
)
from api.client.admin import Admin, acl_body
from api.client.errors import ClientError
from metalog.security import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


def _operation(value: str) -> Operation:
    """kafka-acls spells operations in CamelCase (``Read``, ``DescribeConfigs``); ours too."""
    key = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(value)).upper()
    for candidate in (value.upper().replace("-", "_"), key):
        if candidate in Operation.__members__:
            return Operation[candidate]
    raise click.BadParameter(
        f"{value!r}: one of {', '.join(o.title().replace('_', '') for o in Operation)}",
        param_hint="--operation",
    )


def _resources(
    topics: tuple[str, ...], groups: tuple[str, ...], txids: tuple[str, ...], cluster: bool
) -> list[tuple[ResourceType, str]]:
    out = [(T, t) for t in topics] + [(G, g) for g in groups] + [(X, x) for x in txids]
    if cluster:
        out.append((C, CLUSTER_NAME))
    return out


def _who(
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) for every principal and host given."""
    out = [(p, h, Permission.ALLOW) for p in allow for h in allow_hosts or ("*",)]
    out += [(p, h, Permission.DENY) for p in deny for h in deny_hosts or ("*",)]
    return out


def _client(bootstrap: str | None) -> Admin:
    return Admin(resolve_bootstrap(bootstrap), security=client_security())


def _fail(e: ClientError) -> AdminError:
    return AdminError(e.message or str(e))


def _rows(acls: list[AclBinding]) -> list[list[Any]]:
    return [
        [
            a.principal,
            a.host,
            a.operation,
            a.permission,
            a.resource_type,
            a.resource_name,
            a.pattern_type,
        ]
        for a in acls
    ]


HEADER = ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE TYPE", "NAME", "PATTERN"]


def _show(acls: list[AclBinding], as_json: bool) -> None:
    if as_json:
        emit_json([acl_body(a) for a in acls])
    else:
        print_table(_rows(acls), HEADER)


def resource_options(f: Any) -> Any:
    for opt in reversed(
        [
            click.option(
                "--topic", "topics", multiple=True, metavar="NAME", help="A topic (repeatable)."
            ),
            click.option(
                "--group",
                "groups",
                multiple=True,
                metavar="NAME",
                help="A consumer group (repeatable).",
            ),
            click.option(
                "--transactional-id",
                "txids",
                multiple=True,
                metavar="ID",
                help="A transactional id (repeatable).",
            ),
            click.option("--cluster", is_flag=True, help=f"The cluster ({CLUSTER_NAME})."),
        ]
    ):
        f = opt(f)
    return f


def who_options(f: Any) -> Any:
    for opt in reversed(
        [
            click.option("--allow-principal", "allow", multiple=True, metavar="User:NAME"),
            click.option("--deny-principal", "deny", multiple=True, metavar="User:NAME"),
            click.option(
                "--allow-host", "allow_hosts", multiple=True, metavar="HOST", help="Default: *."
            ),
            click.option(
                "--deny-host", "deny_hosts", multiple=True, metavar="HOST", help="Default: *."
            ),
            click.option(
                "--operation",
                "operations",
                multiple=True,
                metavar="OP",
                help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable).",
            ),
        ]
    ):
        f = opt(f)
    return f


@main.group("acls")
def acls_group() -> None:
    """Add, list and remove ACLs (kafka-acls' flags)."""


def expand_bindings(
    resources: list[tuple[ResourceType, str]],
    who: list[tuple[str, str, Permission]],
    operations: list[Operation],
    pattern: PatternType,
    *,
    producer: bool = False,
    consumer: bool = False,
    idempotent: bool = False,
) -> list[AclBinding]:
    """The bindings ``kafka-acls --add`` would create for these flags (its ``--producer`` and
    ``--consumer`` expansions included)."""
    per_resource: list[tuple[ResourceType, str, list[Operation]]] = []
    if producer or consumer:
        for rtype, name in resources:
            ops: list[Operation] = []
            if producer and rtype is T:
                ops += [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
            if producer and rtype is X:
                ops += [Operation.WRITE, Operation.DESCRIBE]
            if consumer and rtype is T:
                ops += [Operation.READ, Operation.DESCRIBE]
            if consumer and rtype is G:
                ops += [Operation.READ]
            if ops:
                per_resource.append((rtype, name, list(dict.fromkeys(ops))))
        if producer and idempotent:
            per_resource.append((C, CLUSTER_NAME, [Operation.IDEMPOTENT_WRITE]))
    else:
        per_resource = [(rtype, name, operations or [Operation.ALL]) for rtype, name in resources]
    out = []
    for rtype, name, ops in per_resource:
        # The cluster is one LITERAL resource whatever the pattern type asked.
        p = PatternType.LITERAL if rtype is C else pattern
        for principal, host, permission in who:
            for op in ops:
                out.append(AclBinding(principal, host, rtype, name, p, op, permission))
    return list(dict.fromkeys(out))


@acls_group.command("add")
@resource_options
@who_options
@click.option(
    "--resource-pattern-type",
    "pattern",
    type=click.Choice(["literal", "prefixed"], case_sensitive=False),
    default="literal",
    show_default=True,
)
@click.option("--producer", is_flag=True, help="The ACLs a producer needs.")
@click.option("--consumer", is_flag=True, help="The ACLs a consumer needs (with --group).")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster.")
@bootstrap_option
@json_option
def acls_add(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txids: tuple[str, ...],
    cluster: bool,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    pattern: str,
    producer: bool,
    consumer: bool,
    idempotent: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Add ACLs: every principal x host x operation on every resource, all or none."""
    resources = _resources(topics, groups, txids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    who = _who(allow, deny, allow_hosts, deny_hosts)
    if not who:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    if (producer or consumer) and operations:
        raise click.UsageError("--producer/--consumer choose the operations; drop --operation")
    if consumer and not groups:
        raise click.UsageError("--consumer needs --group")
    bindings = expand_bindings(
        resources,
        who,
        [_operation(o) for o in operations],
        PatternType(pattern.upper()),
        producer=producer,
        consumer=consumer,
        idempotent=idempotent,
    )
    if not bindings:
        raise click.UsageError(
            "these flags name no ACL (--producer needs --topic or --transactional-id)"
        )
    try:
        _client(bootstrap).create_acls(bindings)
    except ClientError as e:
        raise _fail(e) from None
    if not as_json:
        click.echo(f"added {len(bindings)} ACL(s):")
    _show(bindings, as_json)


def _filters(
    resources: list[tuple[ResourceType, str]],
    who: list[tuple[str, str, Permission]],
    principals: tuple[str, ...],
    operations: list[Operation],
    pattern: str,
) -> list[AclBindingFilter]:
    targets: list[tuple[ResourceType | None, str | None]] = list(resources) or [(None, None)]
    people: list[tuple[str | None, str | None, Permission | None]] = list(who) + [
        (p, None, None) for p in principals
    ]
    ops: list[Operation | None] = list(operations) or [None]
    out = []
    for rtype, name in targets:
        for principal, host, permission in people or [(None, None, None)]:
            for op in ops:
                out.append(
                    AclBindingFilter(
                        principal=principal,
                        host=host,
                        resource_type=rtype,
                        resource_name=name,
                        pattern_type="ANY" if rtype is None else pattern.upper(),
                        operation=op,
                        permission=permission,
                    )
                )
    return out


def _matching(admin: Admin, filters: list[AclBindingFilter]) -> Iterator[AclBinding]:
    everything = admin.describe_acls()
    for acl in everything:
        if any(f.matches(acl) for f in filters):
            yield acl


pattern_filter_option = click.option(
    "--resource-pattern-type",
    "pattern",
    type=click.Choice(["literal", "prefixed", "match", "any"], case_sensitive=False),
    default="literal",
    show_default=True,
    help="match: every ACL that applies to the named resources; any: either pattern type.",
)


@acls_group.command("list")
@resource_options
@click.option("--principal", "principals", multiple=True, metavar="User:NAME")
@pattern_filter_option
@bootstrap_option
@json_option
def acls_list(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txids: tuple[str, ...],
    cluster: bool,
    principals: tuple[str, ...],
    pattern: str,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """List ACLs: all, or those of the named resources and principals."""
    filters = _filters(_resources(topics, groups, txids, cluster), [], principals, [], pattern)
    try:
        acls = list(_matching(_client(bootstrap), filters))
    except ClientError as e:
        raise _fail(e) from None
    _show(acls, as_json)


@acls_group.command("remove")
@resource_options
@who_options
@click.option("--principal", "principals", multiple=True, metavar="User:NAME")
@pattern_filter_option
@click.option("--force", "--yes", "-y", "yes", is_flag=True, help="Do not ask.")
@bootstrap_option
@json_option
def acls_remove(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txids: tuple[str, ...],
    cluster: bool,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    principals: tuple[str, ...],
    pattern: str,
    yes: bool,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Remove the ACLs of the named resources (narrowed by principal, host, operation)."""
    resources = _resources(topics, groups, txids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    filters = _filters(
        resources,
        _who(allow, deny, allow_hosts, deny_hosts),
        principals,
        [_operation(o) for o in operations],
        pattern,
    )
    admin = _client(bootstrap)
    confirm_unless_yes(yes, f"Remove the ACLs matching {len(filters)} filter(s)?")
    removed: list[AclBinding] = []
    try:
        for flt in filters:
            removed += admin.delete_acls(flt)
    except ClientError as e:
        raise _fail(e) from None
    if not as_json:
        click.echo(f"removed {len(removed)} ACL(s):")
    _show(removed, as_json)
