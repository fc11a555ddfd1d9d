"""What the ``longboat`` subcommands share: the root command group, the local cluster file,
the bootstrap and output options, the event loop, node start options, and a blocking client of
a broker's v3 API.

Subcommand modules import from here and never from each other, so the command line has no
import cycle: ``api.cli.main`` imports every subcommand module (each registers itself on
``main``), and the subcommands import only this module and the layers below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="longboat")
@click.option(
    "--ssl-cafile",
    metavar="PEM",
    help="CA bundle to trust for https:// brokers. Env: LONGBOAT_SSL_CAFILE.",
)
@click.option("--ssl-certfile", metavar="PEM", help="Client certificate (mTLS).")
@click.option("--ssl-keyfile", metavar="PEM", help="The client certificate's key.")
@click.option(
    "--username",
    help="HTTP Basic user; the password comes from $LONGBOAT_PASSWORD or a prompt.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True),
    help="A file holding a bearer token (JWT). Env: LONGBOAT_TOKEN.",
)
def main(
    ssl_cafile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    username: str | None,
    token_file: str | None,
) -> None:
    """Longboat: a Kafka-style event log service."""
    # The subcommands read their client security from the environment (client_security),
    # so these options reach every one of them without each declaring them.
    given = {
        "LONGBOAT_SSL_CAFILE": ssl_cafile,
        "LONGBOAT_SSL_CERTFILE": ssl_certfile,
        "LONGBOAT_SSL_KEYFILE": ssl_keyfile,
        "LONGBOAT_USERNAME": username,
    }
    if token_file is not None:
        given["LONGBOAT_TOKEN"] = Path(token_file).read_text().strip()
    if username is not None and not os.environ.get("LONGBOAT_PASSWORD"):
        given["LONGBOAT_PASSWORD"] = click.prompt(f"password for {username}", hide_input=True)
    os.environ.update({k: v for k, v in given.items() if v is not None})


def client_security() -> Any:
    """The ``ClientSecurity`` the CLI's clients use: options and ``LONGBOAT_*`` variables,
    then the TLS files of a ``longboat dev up --secure`` cluster file; None: plaintext."""
    from api.client.security import ClientSecurity

    tls = (load_cluster() or {}).get("tls") or {}
    try:
        return ClientSecurity.from_env(
            ssl_cafile=tls.get("ssl_cafile"),
            ssl_certfile=tls.get("ssl_certfile"),
            ssl_keyfile=tls.get("ssl_keyfile"),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None


CLUSTER_FILE_ENV = "LONGBOAT_CLUSTER_FILE"
DEFAULT_DIR = Path("var/dev")


def cluster_file() -> Path:
    """Where the local cluster's description lives (``$LONGBOAT_CLUSTER_FILE`` or
    ``./var/dev/cluster.json``)."""
    return Path(os.environ.get(CLUSTER_FILE_ENV, DEFAULT_DIR / "cluster.json"))


def load_cluster() -> dict[str, Any] | None:
    p = cluster_file()
    if not p.exists():
        return None
    try:
        data: dict[str, Any] = json.loads(p.read_text())
        return data
    except (OSError, ValueError):
        return None


def default_bootstrap() -> str | None:
    env = os.environ.get("LONGBOAT_BOOTSTRAP")
    if env:
        return env
    cluster = load_cluster()
    if cluster and cluster.get("brokers"):
        return ",".join(b["url"] for b in cluster["brokers"])
    return None


def resolve_bootstrap(bootstrap: str | None) -> str:
    b = bootstrap or default_bootstrap()
    if not b:
        raise click.UsageError(
            f"no --bootstrap given, $LONGBOAT_BOOTSTRAP unset and no local cluster file at "
            f"{cluster_file()} (start one with `longboat dev up` or pass --bootstrap URL)"
        )
    return b


bootstrap_option = click.option(
    "--bootstrap",
    "-b",
    metavar="URL[,URL...]",
    help="Broker URL(s). Default: $LONGBOAT_BOOTSTRAP, else the local cluster file.",
)


def setup_logging(node: str, level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {node} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run_loop(coro: Any) -> Any:
    """Run ``coro`` on uvloop where available (faster small requests), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# A node whose essential task died exits with this status (BSD's EX_SOFTWARE): a supervisor
# (systemd, `longboat dev up`, a test) tells it from a clean stop (0) and a usage error (2).
NODE_FAILED_EXIT_STATUS = 70


def run_node(coro: Any) -> Any:
    """``run_loop`` for a node process: an essential task's death exits with status 70."""
    from api.node.config import ConfigError
    from common.essential import NodeFailedError

    try:
        return run_loop(coro)
    except NodeFailedError as e:
        click.echo(f"longboat: node failed: {e}", err=True)
        sys.exit(NODE_FAILED_EXIT_STATUS)
    except ConfigError as e:  # a damaged file in the data directory, found at start
        raise click.ClickException(f"cannot start: {e}") from None


def default_controllers() -> str:
    """Controller URLs from ``longboat dev up``'s cluster file, else the default port."""
    cluster = load_cluster()
    if cluster and cluster.get("controllers"):
        return ",".join(c["url"] for c in cluster["controllers"])
    return "http://127.0.0.1:9301"


def node_options(f: Any) -> Any:
    """The options every ``<role> start`` command takes: a TOML file and its overrides."""
    for opt in reversed(
        [
            click.option(
                "--config", "config_path", type=click.Path(dir_okay=False), help="TOML file."
            ),
            click.option("--node-id", type=int, help="Overrides node_id."),
            click.option("--listen", help="HOST:PORT; overrides listen."),
            click.option("--data-dir", help="Overrides data_dir."),
            click.option(
                "--controller-quorum", help="ID@HOST:PORT,...; overrides controller_quorum."
            ),
        ]
    ):
        f = opt(f)
    return f


override_option = click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any config key (as in the TOML file), e.g. broker_session_timeout_ms=3000; "
    "repeatable. Like Kafka's --override.",
)


def with_overrides(explicit: dict[str, Any], overrides: tuple[str, ...]) -> dict[str, Any]:
    """``explicit`` (the command's own flags; None = not given) plus ``--override`` pairs;
    a flag given explicitly wins over an override of the same key."""
    out = dict(explicit)
    for o in overrides:
        key, sep, value = o.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--override {o!r}: expected KEY=VALUE")
        if out.get(key.strip()) is None:
            out[key.strip()] = value.strip()
    return out


TIMEOUT_S = 30.0


class AdminError(click.ClickException):
    pass


class HttpAdmin:
    """A blocking client of a broker's v3 API over ``urllib`` (no event loop needed)."""

    def __init__(self, bootstrap: str) -> None:
        self.urls = [u.strip().rstrip("/") for u in bootstrap.split(",") if u.strip()]
        self.url = ""
        self._cluster_id: str | None = None
        security = client_security()
        self._ssl = None if security is None else security.ssl_context()
        auth = None if security is None else security.authorization()
        self._headers = {"Content-Type": "application/json"}
        if auth is not None:
            self._headers["Authorization"] = auth

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        errors = []
        for url in ([self.url] if self.url else []) + [u for u in self.urls if u != self.url]:
            req = urllib.request.Request(
                url + path, data=data, method=method, headers=self._headers
            )
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self._ssl) as r:
                    raw = r.read()
                    self.url = url
                    return r.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                raw = e.read()
                try:
                    err = json.loads(raw)
                except ValueError:
                    err = {"error_code": e.code, "message": raw[:200].decode(errors="replace")}
                raise AdminError(
                    f"{err.get('message')} (HTTP {e.code}, error_code {err.get('error_code')})"
                ) from None
            except (urllib.error.URLError, OSError) as e:
                errors.append(f"{url}: {getattr(e, 'reason', e)}")
        raise AdminError("no broker answered: " + "; ".join(errors))

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            _, body = self.request("GET", "/v3/clusters")
            self._cluster_id = str(body["data"][0]["cluster_id"])
        return self._cluster_id

    def v3(self, path: str = "") -> str:
        return f"/v3/clusters/{self.cluster_id}{path}"


def print_table(rows: list[list[Any]], header: list[str]) -> None:
    cells = [header] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


json_option = click.option("--json", "as_json", is_flag=True, help="JSON output for scripts.")

yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask.")


def confirm_unless_yes(yes: bool, question: str) -> None:
    """Ask ``question`` before a destructive step unless ``--yes`` was given or nobody is at a
    terminal to answer (a script); answering no aborts the command."""
    if not yes and sys.stdin.isatty():
        click.confirm(question, abort=True)
