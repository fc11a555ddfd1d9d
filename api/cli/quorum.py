"""``longboat controller start`` and ``longboat quorum status|add-voter|remove-voter``.

The quorum commands talk to controllers with the CLI's client security (``--ssl-cafile``,
``--ssl-certfile``/``--ssl-keyfile``, ``--username``/``--token-file``, the ``LONGBOAT_*``
variables, or the TLS files of a ``dev up --secure`` cluster file; issue 18): a secure
controller listener wants TLS and, for ``add-voter``/``remove-voter`` (node routes), a
principal with ``CLUSTER_ACTION`` on the cluster, such as the admin certificate.
"""

from __future__ import annotations

import json
import ssl
import time
from typing import TYPE_CHECKING, Any

import click

from api.cli.common import (
    client_security,
    default_controllers,
    main,
    node_options,
    override_option,
    run_loop,
    run_node,
    setup_logging,
    with_overrides,
)
from api.node.config import ConfigError, load_config

if TYPE_CHECKING:
    import aiohttp


@main.group("controller")
def controller_group() -> None:
    """Run a controller: a voter of the metadata quorum."""


@controller_group.command("start")
@node_options
@click.option(
    "--join",
    is_flag=True,
    help="Join a running quorum: wait to be added with `longboat quorum add-voter`.",
)
@override_option
@click.option("--log-level", default="INFO", show_default=True)
def controller_start(
    config_path: str | None,
    node_id: int | None,
    listen: str | None,
    data_dir: str | None,
    controller_quorum: str | None,
    join: bool,
    overrides: tuple[str, ...],
    log_level: str,
) -> None:
    """Start a controller in the foreground (Ctrl-C stops it cleanly)."""
    try:
        cfg = load_config(
            config_path,
            with_overrides(
                {
                    "node_id": node_id,
                    "listen": listen,
                    "data_dir": data_dir,
                    "controller_quorum": controller_quorum,
                    "roles": ["controller"],
                },
                overrides,
            ),
        )
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    setup_logging(f"controller-{cfg.node_id}", log_level)
    from api.node.controller_app import serve_controller
    from common.netbind import set_source_host

    set_source_host(cfg.host)  # partitions between 127.0.0.N tell nodes apart by source
    run_node(serve_controller(cfg, join=join))


@main.group("quorum")
def quorum_group() -> None:
    """Inspect the metadata quorum."""


def _controller_tls() -> tuple[ssl.SSLContext | None, dict[str, str]]:
    """The TLS context and headers the quorum commands send to controllers: credentials
    (``Authorization``) only without a client certificate, as a controller listener is
    usually SSL, which refuses an ``Authorization`` header, and a certificate identifies the
    caller on a SASL_SSL one too."""
    security = client_security()
    if security is None:
        return None, {}
    auth = security.authorization() if security.ssl_certfile is None else None
    return security.ssl_context(), ({"Authorization": auth} if auth is not None else {})


def _unreachable(errors: list[str]) -> str:
    """Why no controller answered, with a hint where a certificate was probably missing."""
    why = "no controller answered: " + "; ".join(errors)
    security = client_security()
    if any(u.startswith("https://") for u in errors) and (
        security is None or security.ssl_certfile is None
    ):
        why += (
            " (a secure controller listener wants a client certificate of the cluster's CA: "
            "--ssl-certfile/--ssl-keyfile, or LONGBOAT_SSL_CERTFILE/LONGBOAT_SSL_KEYFILE)"
        )
    return why


def _controller_session() -> aiohttp.ClientSession:
    """A session for ``ControllerClient`` with the CLI's security; made inside the loop."""
    import aiohttp

    ctx, headers = _controller_tls()
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5),
        connector=aiohttp.TCPConnector(ssl=ctx) if ctx is not None else None,
        headers=headers,
    )


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


@quorum_group.command("status")
@click.option(
    "--bootstrap",
    default=lambda: default_controllers(),
    show_default="the local cluster file, else http://127.0.0.1:9301",
    help="Controller URL(s), comma-separated.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def quorum_status(bootstrap: str, as_json: bool) -> None:
    """Leader, term, high watermark, and each voter's and observer's log end, lag and last
    contact (like kafka-metadata-quorum describe --status --replication); then the brokers
    following the metadata log, with their fetch offset, lag and last fetch."""
    from metalog.client import ControllerClient, ControllerUnavailableError

    urls = [u.strip() for u in bootstrap.split(",") if u.strip()]

    async def fetch() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with _controller_session() as s, ControllerClient(urls, timeout_s=5, session=s) as c:
            st = await c.get_json("/v3/quorum/status")
            leader_url = st.get("leader_url")
            if st.get("role") != "leader" and leader_url:
                st = await c.get_json("/v3/quorum/status", leader_url)
            # Brokers fetch metadata from any controller (the leader when they know it):
            # ask every voter and keep each broker's latest fetch.
            seen = [dict(o, via=st.get("node_id")) for o in st.get("metadata_observers", [])]
            for nid, url in (st.get("addresses") or {}).items():
                if int(nid) == st.get("node_id") or int(nid) not in st.get("voters", []):
                    continue
                try:
                    other = await c.get_json("/v3/quorum/status", url)
                except ControllerUnavailableError:
                    continue
                seen += [dict(o, via=int(nid)) for o in other.get("metadata_observers", [])]
            return st, seen

    try:
        st, seen = run_loop(fetch())
    except ControllerUnavailableError as e:
        raise click.ClickException(_unreachable([str(e)])) from None
    if st.get("role") != "leader":
        raise click.ClickException(
            f"no leader: node {st['node_id']} is {st['role']} in term {st['term']}"
        )
    hw = st["commit"]
    replicas = [
        {
            "node_id": st["node_id"],
            "kind": "voter",
            "log_end": st["last_index"],
            "lag": 0,
            "last_contact_ms": 0.0,
            "state": "leader",
        }
    ]
    for f in st["followers"]:
        replicas.append(
            {
                "node_id": f["node_id"],
                "kind": "observer" if f["is_observer"] else "voter",
                "log_end": f["match"],
                "lag": max(0, st["last_index"] - f["match"]),
                "last_contact_ms": f["last_contact_ms"],
                "state": f["state"],
            }
        )
    md_offset = st.get("metadata_offset", -1)
    latest: dict[int, dict[str, Any]] = {}
    for o in seen:
        cur = latest.get(o["broker_id"])
        if cur is None or o["last_contact_ms"] < cur["last_contact_ms"]:
            latest[o["broker_id"]] = o
    brokers = [
        {
            "broker_id": b,
            "fetch_offset": o["fetch_offset"],
            "lag": max(0, md_offset + 1 - o["fetch_offset"]),
            "last_contact_ms": o["last_contact_ms"],
            "fetching_from": o["via"],
        }
        for b, o in sorted(latest.items())
    ]
    out = {
        "leader_id": st["node_id"],
        "term": st["term"],
        "high_watermark": hw,
        "metadata_offset": md_offset,
        "voters": st["voters"],
        "observers": st["observers"],
        "replicas": replicas,
        "broker_observers": brokers,
    }
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"LeaderId:        {out['leader_id']}")
    click.echo(f"LeaderEpoch:     {out['term']}")
    click.echo(f"HighWatermark:   {hw}")
    click.echo(f"MetadataOffset:  {out['metadata_offset']}")
    click.echo(f"CurrentVoters:   {out['voters']}")
    click.echo(f"CurrentObservers:{out['observers']}")
    click.echo("")
    click.echo(
        f"{'NodeId':>6}  {'Kind':8} {'LogEndOffset':>12} {'Lag':>6}  {'LastContact':>12}  State"
    )
    for r in replicas:
        click.echo(
            f"{r['node_id']:>6}  {r['kind']:8} {r['log_end']:>12} {r['lag']:>6}  "
            f"{_fmt_ms(r['last_contact_ms']):>12}  {r['state']}"
        )
    if brokers:
        click.echo("")
        click.echo("Broker observers (fetching the metadata log; offsets are metadata offsets):")
        click.echo(f"{'BrokerId':>8}  {'FetchOffset':>11} {'Lag':>6}  {'LastContact':>12}  From")
        for b in brokers:
            click.echo(
                f"{b['broker_id']:>8}  {b['fetch_offset']:>11} {b['lag']:>6}  "
                f"{_fmt_ms(b['last_contact_ms']):>12}  controller {b['fetching_from']}"
            )


def _post_json(url: str, body: dict[str, Any], timeout_s: float = 60) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    ctx, headers = _controller_tls()
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw or b"{}")
        except ValueError:
            return e.code, {"message": raw[:200].decode(errors="replace")}


def _membership(bootstrap: str, body: dict[str, Any]) -> dict[str, Any]:
    from metalog.client import ControllerClient

    urls = [u.strip().rstrip("/") for u in bootstrap.split(",") if u.strip()]

    errors: dict[str, str] = {}

    async def find_leader() -> str | None:
        # Ask every bootstrap controller: a removed voter, or one cut off, does not know the
        # leader (found by the membership nemesis of jepsen_tests).
        async with _controller_session() as s, ControllerClient(urls, timeout_s=5, session=s) as c:
            for u in urls:
                try:
                    st = await c.get_json("/v3/quorum/status", url=u)
                except Exception as e:
                    # Said at the end if no controller answers: a refused handshake or a
                    # 401 is the operator's to fix, not a wait.
                    errors[u] = str(e) or type(e).__name__
                    continue
                if st.get("role") == "leader":
                    return u
                if st.get("leader_url"):
                    return str(st["leader_url"])
        return None

    code: int = 0
    out: dict[str, Any] = {"message": "no controller answered"}
    for attempt in range(10):
        leader_url = run_loop(find_leader())
        if leader_url is None:
            out = {"message": _unreachable(list(errors.values()))}
            time.sleep(min(0.2 * (attempt + 1), 1.0))
            continue
        code, out = _post_json(f"{leader_url}/internal/controller/v1/membership", body)
        if code == 421 and out.get("leader_url"):
            code, out = _post_json(f"{out['leader_url']}/internal/controller/v1/membership", body)
        if code != 421:
            break
        time.sleep(min(0.2 * (attempt + 1), 1.0))
    if code != 200:
        raise click.ClickException(f"{body['op']} failed: {out.get('message', out)}")
    return out


@quorum_group.command("add-voter")
@click.option("--node-id", type=int, required=True)
@click.option("--url", required=True, help="The new controller's URL (started with --join).")
@click.option(
    "--bootstrap",
    default=lambda: default_controllers(),
    show_default="the local cluster file, else http://127.0.0.1:9301",
)
def quorum_add_voter(node_id: int, url: str, bootstrap: str) -> None:
    """Add a controller (started with `controller start --join`) as a voter: it joins as an
    observer, catches up, then is promoted (one change at a time)."""
    out = _membership(bootstrap, {"op": "add-voter", "node_id": node_id, "url": url})
    click.echo(f"voters: {out['voters']}  observers: {out['observers']}")


@quorum_group.command("remove-voter")
@click.option("--node-id", type=int, required=True)
@click.option(
    "--bootstrap",
    default=lambda: default_controllers(),
    show_default="the local cluster file, else http://127.0.0.1:9301",
)
def quorum_remove_voter(node_id: int, bootstrap: str) -> None:
    """Remove a voter. A leader that removes itself resigns after the change commits."""
    out = _membership(bootstrap, {"op": "remove-voter", "node_id": node_id})
    click.echo(f"voters: {out['voters']}  observers: {out['observers']}")
