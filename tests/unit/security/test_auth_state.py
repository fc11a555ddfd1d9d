"""HTTP Basic checks before and after a broker's metadata first caught up: a user the node
does not know yet is told to retry (503), not refused (401), until the node has read the
log up to the controller's commit once (a just-restarted broker opened its listeners about
170 ms before its image held a user the Jepsen run on a secure cluster used)."""

from __future__ import annotations

import pytest

from api.client.errors import ClientError
from api.client.transport import _raise_for_security
from api.http.auth import (
    AuthenticationError,
    AuthState,
    CredentialsNotCurrentError,
    StaticCredentials,
)
from metalog.security import ScramCredential


def _state(caught_up: list[bool]) -> AuthState:
    cred = ScramCredential.derive("SCRAM-SHA-256", "an oar", b"salt-salt", 4096)
    state = AuthState(StaticCredentials({("bob", "SCRAM-SHA-256"): cred}))
    state.metadata_caught_up = lambda: caught_up[0]
    return state


def test_an_unknown_user_before_the_first_catch_up_is_told_to_retry() -> None:
    caught_up = [False]
    state = _state(caught_up)
    with pytest.raises(CredentialsNotCurrentError):
        state.basic_principal("alice", "whatever")
    # A known user is checked as ever: the right password passes, a wrong one is refused.
    assert state.basic_principal("bob", "an oar") == "User:bob"
    with pytest.raises(AuthenticationError):
        state.basic_principal("bob", "wrong")
    caught_up[0] = True
    with pytest.raises(AuthenticationError):
        state.basic_principal("alice", "whatever")
    # Once caught up, a later lag (a new user not yet here) is a refusal, as in Kafka.
    caught_up[0] = False
    with pytest.raises(AuthenticationError):
        state.basic_principal("alice", "whatever")


def test_a_node_without_a_catch_up_signal_refuses_unknown_users() -> None:
    state = AuthState(StaticCredentials())
    with pytest.raises(AuthenticationError):
        state.basic_principal("alice", "whatever")


def test_the_client_takes_the_503_as_retriable() -> None:
    body = b'{"error_code":50302,"message":"still catching up; retry"}'
    with pytest.raises(ClientError) as e:
        _raise_for_security(503, body, "https://b1")
    assert e.value.code == "BROKER_NOT_AVAILABLE" and e.value.retriable
    assert "catching up" in str(e.value)
    _raise_for_security(200, b"{}", "https://b1")  # anything else passes through
