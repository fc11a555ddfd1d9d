"""Which of a broker's registered endpoints another node or a client dials (issue 18).

A broker registers its listeners in the metadata log as ``Endpoint(name, host, port)``. The
first is what clients dial, named by its URL scheme (``http`` or ``https``), as before named
listeners existed; then one endpoint per named listener (``CLIENT``, ``BROKER``, ...), then
the Kafka protocol listener (``kafka``). Brokers dial each other on the inter-broker
listener: the endpoint of that name, with the scheme the dialling node's own protocol map
gives it (Kafka's brokers share ``listener.security.protocol.map``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from metalog.records import Endpoint

SCHEMES = ("http", "https")


def endpoint_url(endpoints: Sequence[Endpoint], listener: tuple[str, str] | None) -> str | None:
    """The URL of the endpoint named ``listener[0]`` with scheme ``listener[1]``; without a
    listener, or when the broker registered none of that name (a broker of an older
    config), the first endpoint."""
    if listener is not None:
        name, scheme = listener
        for ep in endpoints:
            if ep.name == name:
                return f"{scheme}://{ep.host}:{ep.port}"
    if not endpoints:
        return None
    ep = endpoints[0]
    return f"{ep.name if ep.name in SCHEMES else 'http'}://{ep.host}:{ep.port}"
