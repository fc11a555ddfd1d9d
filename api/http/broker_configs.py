"""Broker configs, read-only, in the Confluent REST Proxy v3 shape.

Routes, under ``/v3/clusters/{cluster_id}``:

* ``GET /broker-configs[/{name}]``: the value every broker gets when its file does not set a
  key (``KafkaClusterConfig``, ``config_type`` BROKER). Longboat has no dynamic cluster-wide
  broker configs, so these are the defaults (``source`` DEFAULT_CONFIG); keys without a
  default (``node_id``, ``data_dir``) are not listed.
* ``GET /brokers/{broker_id}/configs[/{name}]``: one broker's node config
  (``KafkaBrokerConfig``): what its TOML file and command line set (``STATIC_BROKER_CONFIG``)
  or the default. Another broker's are asked of that broker (its ``http`` endpoint in the
  metadata image), once: a request it forwarded is answered locally or refused.

Each config is ``{name, value, is_default, is_read_only, is_sensitive, source, synonyms}``;
names are the node config's keys (``replica_lag_time_max_ms``), as in the TOML file. Every
config is read-only here (a node config changes with a restart). A sensitive one (a
password, secret, token, key, credential: ``is_sensitive``) is shown with a null value, as
Kafka's DescribeConfigs does, in its synonyms too, so no secret leaves the node this way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import BaseModel

from api.http.context import base_url, ctx_of, json_response, path_int
from api.http.errors import HttpError
from broker.endpoints import endpoint_url
from common import netbind
from common.principal import forwarding_headers
from metalog.records import BrokerId

FORWARDED_HEADER = "X-Longboat-Forwarded"
FORWARD_TIMEOUT_S = 5.0
CONFIG_KEY: web.AppKey[BaseModel] = web.AppKey("node_config", BaseModel)
"""The node's config (``api.node.config.NodeConfig``: this layer sees it as a model)."""

SENSITIVE = re.compile(
    r"password|passwd|secret|token|credential|private|jaas|sasl|(^|_)keys?($|_)|keystore"
)
"""Config names whose values never leave the node (Kafka's PASSWORD type)."""

STATIC = "STATIC_BROKER_CONFIG"
DEFAULT = "DEFAULT_CONFIG"


def is_sensitive(name: str) -> bool:
    return SENSITIVE.search(name) is not None


def config_text(value: Any) -> str | None:
    """A config value as Kafka shows one: a string, or null for none."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list | frozenset | set):
        return ",".join(str(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def defaults(model: type[BaseModel]) -> dict[str, str | None]:
    """Every key of the config ``model`` with a default, and that default as text."""
    return {
        name: config_text(f.default)
        for name, f in model.model_fields.items()
        if not f.is_required()
    }


def broker_config_entries(config: BaseModel) -> list[dict[str, Any]]:
    """``{name, value, is_default, is_read_only, is_sensitive, source, synonyms}`` for every
    key of ``config``, sorted by name; sensitive values null."""
    model = type(config)
    dflt = defaults(model)
    out = []
    for name in sorted(model.model_fields):
        hidden = is_sensitive(name)
        value = config_text(getattr(config, name))
        static = name in config.model_fields_set
        synonyms = []
        if static:
            synonyms.append({"name": name, "value": value, "source": STATIC})
        if name in dflt:
            synonyms.append({"name": name, "value": dflt[name], "source": DEFAULT})
        if hidden:
            value = None
            for s in synonyms:
                s["value"] = None
        out.append(
            {
                "name": name,
                "value": value,
                "is_default": not static,
                "is_read_only": True,
                "is_sensitive": hidden,
                "source": STATIC if static else DEFAULT,
                "synonyms": synonyms,
            }
        )
    return out


def cluster_config_entries(model: type[BaseModel]) -> list[dict[str, Any]]:
    out = []
    for name, value in sorted(defaults(model).items()):
        hidden = is_sensitive(name)
        shown = None if hidden else value
        out.append(
            {
                "name": name,
                "value": shown,
                "is_default": True,
                "is_read_only": True,
                "is_sensitive": hidden,
                "source": DEFAULT,
                "synonyms": [{"name": name, "value": shown, "source": DEFAULT}],
            }
        )
    return out


def _list(request: web.Request, kind: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"self": f"{base_url(request)}{request.path}", "next": None},
        "data": data,
    }


def _one_or_404(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for e in entries:
        if e["name"] == name:
            return e
    raise HttpError(404, f"Config '{name}' not found.", 404)


def _cluster_entry(request: web.Request, cluster_id: str, e: Mapping[str, Any]) -> dict[str, Any]:
    path = f"/v3/clusters/{cluster_id}/broker-configs/{e['name']}"
    return {
        "kind": "KafkaClusterConfig",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": f"crn:///kafka={cluster_id}/broker-config={e['name']}",
        },
        "cluster_id": cluster_id,
        "config_type": "BROKER",
        **e,
    }


def _broker_entry(
    request: web.Request, cluster_id: str, broker_id: int, e: Mapping[str, Any]
) -> dict[str, Any]:
    path = f"/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{e['name']}"
    return {
        "kind": "KafkaBrokerConfig",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": f"crn:///kafka={cluster_id}/broker={broker_id}/config={e['name']}",
        },
        "cluster_id": cluster_id,
        "broker_id": broker_id,
        **e,
    }


def _model(request: web.Request) -> type[BaseModel]:
    return type(request.app[CONFIG_KEY])


async def list_cluster_configs(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    data = [
        _cluster_entry(request, ctx.cluster_id, e) for e in cluster_config_entries(_model(request))
    ]
    return json_response(_list(request, "KafkaClusterConfigList", data))


async def get_cluster_config(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    e = _one_or_404(cluster_config_entries(_model(request)), request.match_info["name"])
    return json_response(_cluster_entry(request, ctx.cluster_id, e))


async def _broker_or_forward(request: web.Request) -> tuple[int, web.Response | None]:
    """The broker id asked for, and the other broker's answer when it is not this one."""
    ctx = ctx_of(request)
    bid = path_int(request, "broker_id")
    if bid == ctx.broker_id:
        return bid, None
    b = ctx.image.brokers.get(BrokerId(bid))
    if b is None:
        raise HttpError(404, f"Broker {bid} not found.", 404)
    if request.headers.get(FORWARDED_HEADER):
        raise HttpError(404, f"Broker {bid} is not this broker ({ctx.broker_id}).", 404)
    # Its client endpoint, with its scheme (https on a TLS listener; issue 18), dialled with
    # the node's certificate and naming the user, whose rights the other broker checks too.
    base = endpoint_url(b.endpoints, None)
    if base is None:
        raise HttpError(503, f"Broker {bid} has no endpoint to ask.", 50302)
    url = f"{base}{request.path}"
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S),
                connector=netbind.connector(),
            ) as session,
            session.get(url, headers={FORWARDED_HEADER: "1", **forwarding_headers()}) as resp,
        ):
            body = await resp.read()
            ctype = _content_type(resp.headers.get("Content-Type", ""))
            return bid, web.Response(body=body, status=resp.status, content_type=ctype)
    except (aiohttp.ClientError, TimeoutError) as e:
        raise HttpError(
            503, f"Broker {bid} did not answer: {e or type(e).__name__}", 50302
        ) from None


def _content_type(header: str) -> str:
    return header.split(";")[0].strip() or "application/json"


async def list_broker_configs(request: web.Request) -> web.Response:
    bid, forwarded = await _broker_or_forward(request)
    if forwarded is not None:
        return forwarded
    ctx = ctx_of(request)
    config = request.app[CONFIG_KEY]
    data = [_broker_entry(request, ctx.cluster_id, bid, e) for e in broker_config_entries(config)]
    return json_response(_list(request, "KafkaBrokerConfigList", data))


async def get_broker_config(request: web.Request) -> web.Response:
    bid, forwarded = await _broker_or_forward(request)
    if forwarded is not None:
        return forwarded
    ctx = ctx_of(request)
    e = _one_or_404(broker_config_entries(request.app[CONFIG_KEY]), request.match_info["name"])
    return json_response(_broker_entry(request, ctx.cluster_id, bid, e))


def add_broker_config_routes(app: web.Application, config: BaseModel) -> None:
    app[CONFIG_KEY] = config
    c = "/v3/clusters/{cluster_id}"
    app.router.add_get(c + "/broker-configs", list_cluster_configs)
    app.router.add_get(c + "/broker-configs/{name}", get_cluster_config)
    app.router.add_get(c + "/brokers/{broker_id}/configs", list_broker_configs)
    app.router.add_get(c + "/brokers/{broker_id}/configs/{name}", get_broker_config)
