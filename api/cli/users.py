"""``longboat users add|list|remove``: SCRAM credentials of users (issue 18, KIP-554).

``add NAME`` sets (or replaces) the user's credential for ``--mechanism`` (SCRAM-SHA-256 by
default, or SCRAM-SHA-512). The password is read from standard input with
``--password-stdin`` (for scripts: ``printf '%s' "$PW" | longboat users add alice
--password-stdin``) or asked for at the terminal, twice, without echo; never from a flag,
which would leave it in the shell history and the process list. The broker salts it and
stores only what SCRAM needs; ``list`` shows names, mechanisms and iteration counts;
``remove NAME`` deletes one mechanism's credential (``--mechanism``) or all of them.
"""

from __future__ import annotations

import sys

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
    yes_option,
)
from api.client.admin import Admin
from api.client.errors import ClientError
from metalog.security import SCRAM_MECHANISMS

mechanism_choice = click.Choice(sorted(SCRAM_MECHANISMS), case_sensitive=False)


@main.group("users")
def users_group() -> None:
    """Add, list and remove users' SCRAM credentials."""


def _read_password(password_stdin: bool) -> str:
    if password_stdin:
        # One line; the newline a shell's echo adds is not part of the password.
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return password


@users_group.command("add")
@click.argument("name")
@click.option("--mechanism", type=mechanism_choice, default="SCRAM-SHA-256", show_default=True)
@click.option(
    "--iterations", type=click.IntRange(4096, 16384), help="PBKDF2 iterations (default 4096)."
)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@bootstrap_option
def users_add(
    name: str,
    mechanism: str,
    iterations: int | None,
    password_stdin: bool,
    bootstrap: str | None,
) -> None:
    """Set NAME's SCRAM credential (creates the user, or changes its password)."""
    password = _read_password(password_stdin)
    try:
        Admin(resolve_bootstrap(bootstrap), security=client_security()).upsert_user(
            name, password, mechanism=mechanism.upper(), iterations=iterations
        )
    except ClientError as e:
        raise AdminError(e.message or str(e)) from None
    click.echo(f"set {mechanism.upper()} credential of user {name} (principal User:{name})")


@users_group.command("list")
@bootstrap_option
@json_option
def users_list(bootstrap: str | None, as_json: bool) -> None:
    """Users with SCRAM credentials."""
    try:
        users = Admin(resolve_bootstrap(bootstrap), security=client_security()).describe_users()
    except ClientError as e:
        raise AdminError(e.message or str(e)) from None
    if as_json:
        emit_json(
            {
                u: [{"mechanism": c.mechanism, "iterations": c.iterations} for c in creds]
                for u, creds in users.items()
            }
        )
        return
    print_table(
        [[u, c.mechanism, c.iterations] for u, creds in users.items() for c in creds],
        ["USER", "MECHANISM", "ITERATIONS"],
    )


@users_group.command("remove")
@click.argument("name")
@click.option("--mechanism", type=mechanism_choice, help="Default: every mechanism.")
@yes_option
@bootstrap_option
def users_remove(name: str, mechanism: str | None, yes: bool, bootstrap: str | None) -> None:
    """Delete NAME's SCRAM credential(s)."""
    confirm_unless_yes(yes, f"Remove the credentials of user {name}?")
    try:
        Admin(resolve_bootstrap(bootstrap), security=client_security()).delete_user(
            name, mechanism=mechanism.upper() if mechanism else None
        )
    except ClientError as e:
        raise AdminError(e.message or str(e)) from None
    click.echo(f"removed {mechanism.upper() if mechanism else 'every'} credential of user {name}")
