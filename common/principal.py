"""The principal a request runs as, for the code that forwards it to another node (issue 18).

The HTTP layer sets ``CURRENT_PRINCIPAL`` for the task serving a request; a broker forwarding
that request (``broker.router``) sends it in the ``Longboat-Principal`` header, so the broker
that acts on it checks the ACLs of the user, not of the forwarding node. Tasks started while
serving a request inherit it (``contextvars``); node tasks of their own (fetchers, timers)
have none.
"""

from __future__ import annotations

from contextvars import ContextVar

PRINCIPAL_HEADER = "Longboat-Principal"

CURRENT_PRINCIPAL: ContextVar[str | None] = ContextVar("longboat_principal", default=None)


def forwarding_headers() -> dict[str, str]:
    """The header carrying the current principal, if any."""
    p = CURRENT_PRINCIPAL.get()
    return {} if p is None else {PRINCIPAL_HEADER: p}
