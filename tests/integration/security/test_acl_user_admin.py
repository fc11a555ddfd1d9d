"""ACLs and SCRAM users administered on a real cluster (3 controller and 3 broker processes):
through the REST routes, the Python ``Admin`` and the ``longboat acls|users`` commands; bad
input refused with nothing changed; every change visible on every broker; and all of it
kept across a failover of the active controller and a restart of the killed one (which
replays the log)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from http_cluster_support import HttpCluster, http_cluster

from api.cli.main import main
from api.client.admin import Admin
from api.client.errors import ClientError
from metalog.security import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("acl-admin")
    with http_cluster(root) as cl:
        yield cl


def cli(c: HttpCluster, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--bootstrap", ",".join(c.urls)], input=stdin)


def ok(c: HttpCluster, *args: str, stdin: str | None = None) -> str:
    r = cli(c, *args, stdin=stdin)
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r.output


def acls_on(c: HttpCluster, i: int, query: str = "") -> list[dict[str, Any]]:
    st, _, body = c.call("GET", f"{c.v3(i)}/acls{query}")
    assert st == 200, body
    return sorted(
        (
            {k: v for k, v in a.items() if k not in ("kind", "metadata", "cluster_id")}
            for a in body["data"]
        ),
        key=lambda a: json.dumps(a, sort_keys=True),
    )


ALICE_READ = {
    "resource_type": "TOPIC",
    "resource_name": "orders",
    "pattern_type": "LITERAL",
    "principal": "User:alice",
    "host": "*",
    "operation": "READ",
    "permission": "ALLOW",
}


def test_rest_create_search_delete(c: HttpCluster) -> None:
    st, _, body = c.call("POST", f"{c.v3(0)}/acls", ALICE_READ)
    assert st == 201, body
    batch = [
        {**ALICE_READ, "resource_name": "pay-", "pattern_type": "PREFIXED", "operation": "WRITE"},
        {**ALICE_READ, "principal": "User:bob", "permission": "DENY"},
    ]
    st, _, body = c.call("POST", f"{c.v3(1)}/acls:batch", {"data": batch})
    assert st == 201, body
    # Every broker sees all three (a read first catches up with the controller).
    for i in range(3):
        assert len(acls_on(c, i, "?principal=User:alice")) == 2
        assert len(acls_on(c, i)) >= 3
    # MATCH finds what applies to topic pay-1: the prefixed binding only.
    found = acls_on(c, 2, "?resource_type=TOPIC&resource_name=pay-1&pattern_type=MATCH")
    assert [a["resource_name"] for a in found] == ["pay-"]
    one = acls_on(c, 0, "?resource_type=TOPIC&resource_name=orders&principal=User:alice")[0]
    assert one == ALICE_READ
    # A bare DELETE would match everything: refused, nothing deleted.
    st, _, body = c.call("DELETE", f"{c.v3(0)}/acls")
    assert st == 400 and "required" in body["message"]
    st, _, body = c.call(
        "DELETE",
        f"{c.v3(2)}/acls?resource_type=TOPIC&pattern_type=ANY&operation=ANY&permission=DENY",
    )
    assert st == 200 and [a["principal"] for a in body["data"]] == ["User:bob"]
    assert not acls_on(c, 1, "?principal=User:bob")


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"principal": "alice"}, 400),
        ({"principal": ""}, 400),
        ({"pattern_type": "PREFIXED", "resource_name": "*"}, 400),
        ({"operation": "FLY"}, 400),
        ({"resource_type": "GROUP", "operation": "WRITE"}, 400),
        ({"resource_type": "CLUSTER", "resource_name": "x", "operation": "ALTER"}, 400),
        ({"resource_name": 7}, 422),
    ],
)
def test_rest_refuses_bad_acls_and_changes_nothing(
    c: HttpCluster, change: dict[str, Any], status: int
) -> None:
    before = acls_on(c, 0)
    good = {**ALICE_READ, "resource_name": "fine-" + str(len(before))}
    st, _, body = c.call(
        "POST", f"{c.v3(0)}/acls:batch", {"data": [good, {**ALICE_READ, **change}]}
    )
    assert st == status, body
    assert set(body) == {"error_code", "message"}
    assert acls_on(c, 1) == before


def test_rest_users_never_show_secrets(c: HttpCluster) -> None:
    st, _, body = c.call(
        "POST",
        f"{c.v3(0)}/users",
        {"user_name": "carol", "password": "s3cret!", "iterations": 8192},
    )
    assert st == 200, body
    assert body["credentials"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    st, _, body = c.call("GET", f"{c.v3(2)}/users/carol")
    assert st == 200 and body["principal"] == "User:carol"
    assert "s3cret" not in json.dumps(body) and "salt" not in json.dumps(body)
    # The active controller holds it (its mechanisms only are shown; never a salt or a key).
    meta = c.quorum.metadata(c.quorum.wait_active_leader())
    assert meta["scram_users"]["carol"] == ["SCRAM-SHA-256"]
    for bad, status in [
        ({"user_name": "carol", "password": ""}, 422),
        ({"user_name": "carol", "password": "x", "iterations": 100}, 400),
        ({"user_name": "carol", "password": "x", "mechanism": "PLAIN"}, 400),
        ({"user_name": "", "password": "x"}, 422),
    ]:
        st, _, body = c.call("POST", f"{c.v3(1)}/users", bad)
        assert st == status, (bad, body)
    st, _, body = c.call("DELETE", f"{c.v3(1)}/users/nobody")
    assert st == 404
    st, _, _ = c.call("DELETE", f"{c.v3(1)}/users/carol")
    assert st == 204
    st, _, _ = c.call("GET", f"{c.v3(0)}/users/carol")
    assert st == 404


def test_python_admin(c: HttpCluster) -> None:
    admin = Admin(c.urls)
    b = AclBinding(
        "User:dave",
        "*",
        ResourceType.GROUP,
        "g-",
        PatternType.PREFIXED,
        Operation.READ,
        Permission.ALLOW,
    )
    admin.create_acls([b])
    assert admin.describe_acls(AclBindingFilter(principal="User:dave")) == [b]
    assert admin.delete_acls(AclBindingFilter(principal="User:dave")) == [b]
    assert admin.describe_acls(AclBindingFilter(principal="User:dave")) == []
    admin.upsert_user("dave", "pw", mechanism="SCRAM-SHA-512")
    assert [i.mechanism for i in admin.describe_users()["dave"]] == ["SCRAM-SHA-512"]
    with pytest.raises(ClientError) as e:
        admin.delete_user("dave", mechanism="SCRAM-SHA-256")
    assert e.value.code == "40406"
    admin.delete_user("dave")
    assert "dave" not in admin.describe_users()


def test_cli_acls_and_users(c: HttpCluster) -> None:
    out = ok(
        c,
        "acls",
        "add",
        "--allow-principal",
        "User:erin",
        "--producer",
        "--topic",
        "logs",
        "--json",
    )
    assert {a["operation"] for a in json.loads(out)} == {"WRITE", "DESCRIBE", "CREATE"}
    ok(
        c,
        "acls",
        "add",
        "--allow-principal",
        "User:erin",
        "--consumer",
        "--topic",
        "logs",
        "--group",
        "g1",
    )
    ok(
        c,
        "acls",
        "add",
        "--deny-principal",
        "User:erin",
        "--deny-host",
        "10.0.0.9",
        "--operation",
        "Read",
        "--topic",
        "logs-",
        "--resource-pattern-type",
        "prefixed",
    )
    listed = json.loads(ok(c, "acls", "list", "--principal", "User:erin", "--json"))
    assert len(listed) == 6  # WRITE DESCRIBE CREATE READ on logs, READ on g1, the deny
    out = ok(c, "acls", "list", "--topic", "logs")
    assert "User:erin" in out and "PRINCIPAL" in out
    match = json.loads(
        ok(c, "acls", "list", "--topic", "logs-x", "--resource-pattern-type", "match", "--json")
    )
    assert [a["permission"] for a in match] == ["DENY"]
    removed = json.loads(
        ok(c, "acls", "remove", "--topic", "logs", "--operation", "Create", "--force", "--json")
    )
    assert [a["operation"] for a in removed] == ["CREATE"]
    r = cli(c, "acls", "add", "--allow-principal", "erin", "--topic", "t")
    assert r.exit_code == 1 and "User:" in r.output
    r = cli(
        c, "acls", "add", "--allow-principal", "User:erin", "--operation", "Fly", "--topic", "t"
    )
    assert r.exit_code == 2
    assert len(json.loads(ok(c, "acls", "list", "--principal", "User:erin", "--json"))) == 5

    ok(c, "users", "add", "frank", "--password-stdin", stdin="hunter2\n")
    out = ok(c, "users", "list")
    assert "frank" in out and "SCRAM-SHA-256" in out and "hunter2" not in out
    ok(c, "users", "add", "frank", "--mechanism", "scram-sha-512", stdin="pw2\npw2\n")
    users = json.loads(ok(c, "users", "list", "--json"))
    assert sorted(x["mechanism"] for x in users["frank"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    ok(c, "users", "remove", "frank", "--mechanism", "SCRAM-SHA-512", "--yes")
    r = cli(c, "users", "remove", "nobody", "--yes")
    assert r.exit_code == 1 and "nobody" in r.output


def test_acls_and_users_survive_a_controller_failover_and_restart(c: HttpCluster) -> None:
    admin = Admin(c.urls)
    admin.upsert_user("gina", "before-failover")
    admin.create_acls(
        [
            AclBinding(
                "User:gina",
                "*",
                ResourceType.TOPIC,
                "*",
                PatternType.LITERAL,
                Operation.ALL,
                Permission.ALLOW,
            )
        ]
    )
    leader = c.quorum.wait_active_leader()
    before = c.quorum.metadata(leader)
    assert before["acls"] and "gina" in before["scram_users"]
    c.quorum.kill(leader)
    new = c.quorum.wait_active_leader(exclude=leader, timeout_s=30)
    after = c.quorum.metadata(new)
    assert after["acls"] == before["acls"]
    assert after["scram_users"] == before["scram_users"]
    # The new controller takes changes; the brokers follow it.
    admin.upsert_user("gina", "after-failover")
    admin.delete_acls(
        AclBindingFilter(principal="User:gina", resource_name="*", pattern_type="LITERAL")
    )
    assert admin.describe_acls(AclBindingFilter(principal="User:gina")) == []
    # The killed controller comes back and replays the log to the same state.
    c.quorum.start(leader)
    deadline = time.monotonic() + 30
    want = c.quorum.metadata(new)
    while time.monotonic() < deadline:
        try:
            got = c.quorum.metadata(leader)
            if got["offset"] >= want["offset"]:
                break
        except OSError:
            pass
        time.sleep(0.2)
    assert got["acls"] == want["acls"] and got["scram_users"] == want["scram_users"]
    assert "gina" in got["scram_users"]
    assert not any(a["principal"] == "User:gina" for a in got["acls"].values())


def test_no_password_reaches_a_log_or_a_data_file(c: HttpCluster) -> None:
    # Every password the tests above sent, searched in every file of every node (logs,
    # metadata log segments, snapshots): only salted keys may be stored.
    passwords = [b"s3cret!", b"hunter2", b"before-failover", b"after-failover"]
    files = [p for p in c.quorum.root.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".log") for p in files)
    for p in files:
        data = p.read_bytes()
        for pw in passwords:
            assert pw not in data, (pw, p)
