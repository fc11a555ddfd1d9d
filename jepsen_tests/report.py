"""The run report: one self-contained HTML page with inline SVG plots.

Plots (time on x, seconds since the run started; fault windows shaded and labelled):

* throughput: completions per second, one line per outcome (ok, fail, info);
* latency: one point per completed op (log scale, ms), per op kind, coloured by outcome.

Then the verdict, per-anomaly counts, lost writes by fault window and by node, the offending
ops (first few per anomaly), warnings, the fault schedule, what the nemeses noted (files
corrupted, nodes that refused to start), nodes not running at the end, and for a soak the
node processes' memory and open files. No plotting dependency: the SVG
is written here.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from typing import Any

from jepsen_tests.history import FaultWindow, History, Pair

W, H = 900, 260
ML, MR, MT, MB = 60, 20, 30, 40
COLORS = {"ok": "#2a9d3f", "fail": "#d62828", "info": "#f4a300"}
FAULT_COLORS = ["#8ecae6", "#ffb4a2", "#cdb4db", "#b7e4c7", "#ffe66d", "#d4a373"]
SHOW_PER_ANOMALY = 8


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _frame(
    title: str,
    t_max: float,
    y_label: str,
    y_ticks: list[tuple[float, str]],
    y_of: Any,
    windows: list[FaultWindow],
) -> list[str]:
    pw = W - ML - MR
    ph = H - MT - MB

    def x_of(t: float) -> float:
        return ML + pw * (t / t_max if t_max > 0 else 0)

    kinds = sorted({w.kind for w in windows})
    color = {k: FAULT_COLORS[i % len(FAULT_COLORS)] for i, k in enumerate(kinds)}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{ML}" y="16" font-size="13" font-weight="bold">{_esc(title)}</text>',
    ]
    lanes: list[float] = []
    for w in windows:
        x0, x1 = x_of(w.start_ns / 1e9), x_of(w.end_ns / 1e9)
        lane = next((i for i, end in enumerate(lanes) if end < x0), len(lanes))
        if lane == len(lanes):
            lanes.append(x1)
        else:
            lanes[lane] = x1
        out.append(
            f'<rect x="{x0:.1f}" y="{MT}" width="{max(1.0, x1 - x0):.1f}" '
            f'height="{ph}" fill="{color[w.kind]}" opacity="0.45">'
            f"<title>{_esc(w.label)} {w.start_ns / 1e9:.2f}s-{w.end_ns / 1e9:.2f}s"
            f"</title></rect>"
        )
        out.append(
            f'<text x="{x0 + 2:.1f}" y="{MT + 10 + 11 * (lane % 4)}" fill="#333" '
            f'font-size="9">{_esc(w.label)}</text>'
        )
    out.append(f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    step = _nice_step(t_max)
    t = 0.0
    while t <= t_max + 1e-9:
        x = x_of(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{MT + ph}" x2="{x:.1f}" y2="{MT + ph + 4}" stroke="#888"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{MT + ph + 16}" text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{ML + pw / 2}" y="{H - 6}" text-anchor="middle">seconds</text>')
    for v, label in y_ticks:
        y = y_of(v)
        out.append(f'<line x1="{ML - 4}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    out.append(
        f'<text x="14" y="{MT + ph / 2}" transform="rotate(-90 14 {MT + ph / 2})" '
        f'text-anchor="middle">{_esc(y_label)}</text>'
    )
    return out


def _nice_step(span: float) -> float:
    if span <= 0:
        return 1.0
    raw = span / 10
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)


def throughput_svg(pairs: list[Pair], windows: list[FaultWindow], t_max: float) -> str:
    bucket = max(0.25, _nice_step(t_max) / 4)
    n = int(t_max / bucket) + 1
    series: dict[str, list[int]] = {k: [0] * n for k in COLORS}
    for p in pairs:
        if p.complete is None:
            continue
        i = min(n - 1, int(p.complete.time_ns / 1e9 / bucket))
        series[p.complete.type][i] += 1
    rate = {k: [c / bucket for c in v] for k, v in series.items()}
    y_max = max([1.0, *(max(v) for v in rate.values())])
    ph = H - MT - MB

    def y_of(v: float) -> float:
        return MT + ph - ph * v / y_max

    step = _nice_step(y_max)
    ticks = [(i * step, f"{i * step:g}") for i in range(int(y_max / step) + 1)]
    out = _frame("Throughput (completions/s)", t_max, "ops/s", ticks, y_of, windows)
    pw = W - ML - MR
    for k, vs in rate.items():
        pts = " ".join(
            f"{ML + pw * ((i + 0.5) * bucket) / t_max:.1f},{y_of(v):.1f}" for i, v in enumerate(vs)
        )
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{COLORS[k]}" stroke-width="1.5"/>'
        )
    out += _legend()
    out.append("</svg>")
    return "\n".join(out)


def latency_svg(pairs: list[Pair], windows: list[FaultWindow], t_max: float, f: str) -> str:
    pts = [
        (p.invoke.time_ns / 1e9, max(0.01, (p.latency_ns or 0) / 1e6), p.type)
        for p in pairs
        if p.f == f and p.complete is not None
    ]
    hi = max([10.0, *(lat for _, lat, _ in pts)])
    lo = 0.1
    ph = H - MT - MB
    lmin, lmax = math.log10(lo), math.log10(hi * 1.2)

    def y_of(v: float) -> float:
        return MT + ph - ph * (math.log10(max(v, lo)) - lmin) / (lmax - lmin)

    ticks = [(10.0**e, f"{10.0**e:g}") for e in range(-1, int(lmax) + 1)]
    out = _frame(f"Latency of {f} (ms, log scale)", t_max, "ms", ticks, y_of, windows)
    pw = W - ML - MR
    for t, lat, typ in pts[:20000]:
        out.append(
            f'<circle cx="{ML + pw * t / t_max:.1f}" cy="{y_of(lat):.1f}" r="1.6" '
            f'fill="{COLORS[typ]}" opacity="0.6"/>'
        )
    out += _legend()
    out.append("</svg>")
    return "\n".join(out)


def _legend() -> list[str]:
    out = []
    for i, (k, c) in enumerate(COLORS.items()):
        x = W - MR - 150 + 50 * i
        out.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{c}"/>')
        out.append(f'<text x="{x + 14}" y="17">{k}</text>')
    return out


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    h = "".join(f"<th>{_esc(x)}</th>" for x in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def render(results: dict[str, Any], history: History) -> str:
    pairs = history.pairs()
    windows = history.fault_windows()
    t_max = max([1.0, *((o.time_ns / 1e9) for o in history.ops[-1:])])
    result = results.get("result", {})
    valid = result.get("valid")
    counts: dict[str, int] = dict(result.get("counts", {}))
    invalid = set(result.get("anomaly_types", []))
    cfg = results.get("config", {})
    verdict = {True: "VALID", False: "INVALID"}.get(valid, str(valid).upper())
    colour = "#2a9d3f" if valid is True else "#d62828" if valid is False else "#f4a300"
    fs = sorted({p.f for p in pairs if p.complete is not None})
    by_f: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for p in pairs:
        by_f[p.f][p.type] += 1

    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>jepsen_tests report</title>",
        "<style>body{font-family:sans-serif;margin:20px;max-width:960px}"
        "table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:left;font-size:13px}pre{background:#f6f6f6;padding:6px;"
        "font-size:11px;overflow-x:auto}.bad{color:#d62828;font-weight:bold}</style></head><body>",
        f"<h1>Run report: <span style='color:{colour}'>{verdict}</span></h1>",
        "<p>"
        + _esc(
            f"workload={cfg.get('workload')} nemeses={','.join(cfg.get('nemeses', []))} "
            f"seed={cfg.get('seed')} time_limit={cfg.get('time_limit_s')}s "
            f"consumers={cfg.get('consumers', 'assign')}"
            + (f" ({results['group_assignor']})" if results.get("group_assignor") else "")
            + " "
            f"cluster={results.get('cluster')} netns={results.get('netns')} "
            f"ops={len(history)}"
        )
        + "</p>",
    ]
    for w in results.get("warnings", []):
        parts.append(f"<p class='bad'>WARNING: {_esc(w)}</p>")
    parts.append("<h2>Anomalies</h2>")
    if counts:
        parts.append(
            _table(
                [
                    (k, n, "invalidates" if k in invalid else "allowed / informational")
                    for k, n in sorted(counts.items())
                ],
                ("anomaly", "count", "effect"),
            )
        )
    else:
        parts.append("<p>none</p>")
    if result.get("lost_by_fault"):
        parts.append("<h3>Definite lost writes by fault window at acknowledgement</h3>")
        parts.append(_table(sorted(result["lost_by_fault"].items()), ("when", "lost")))
    if result.get("lost_by_node"):
        parts.append("<h3>Definite lost writes by acknowledging node (lost-on-node)</h3>")
        parts.append(_table(sorted(result["lost_by_node"].items()), ("node", "lost")))
    parts.append("<h2>Operations</h2>")
    parts.append(
        _table(
            [
                (f, d.get("ok", 0), d.get("fail", 0), d.get("info", 0))
                for f, d in sorted(by_f.items())
            ],
            ("op", "ok", "fail", "info"),
        )
    )
    parts.append(throughput_svg(pairs, windows, t_max))
    for f in fs:
        if f in ("send", "poll", "create_topic", "delete_topic", "describe_topic", "commit"):
            parts.append(latency_svg(pairs, windows, t_max, f))
    anomalies = result.get("anomalies", {})
    if anomalies:
        parts.append("<h2>Offending operations (first few of each)</h2>")
        for k, entries in sorted(anomalies.items()):
            parts.append(
                f"<h3>{_esc(k)} ({counts.get(k, len(entries))})</h3><pre>"
                + _esc("\n".join(json.dumps(e, default=str) for e in entries[:SHOW_PER_ANOMALY]))
                + "</pre>"
            )
    if windows:
        parts.append("<h2>Fault windows</h2>")
        parts.append(
            _table(
                [
                    (
                        w.id,
                        w.kind,
                        ",".join(w.targets),
                        f"{w.start_ns / 1e9:.2f}",
                        f"{w.end_ns / 1e9:.2f}",
                    )
                    for w in windows
                ],
                ("id", "kind", "targets", "start s", "end s"),
            )
        )
    notes = [o for o in history.nemesis_ops() if o.f not in ("start", "stop")]
    if notes:
        # What the nemeses did beyond starting and stopping: the damage a corruption made,
        # a node that refused to start on it, a node that had exited, a fault it could not do.
        parts.append("<h2>Nemesis notes</h2>")
        parts.append(
            _table(
                [
                    (
                        f"{o.time_ns / 1e9:.2f}",
                        o.f,
                        json.dumps(o.value, sort_keys=True, default=str),
                    )
                    for o in notes[:200]
                ],
                ("at s", "what", "details"),
            )
        )
    dead = results.get("dead_nodes") or {}
    if dead:
        parts.append("<h2>Nodes not running at the end</h2>")
        parts.append(
            _table(
                [(n, d.get("returncode"), d.get("last_log_line")) for n, d in sorted(dead.items())],
                ("node", "exit status", "last log line"),
            )
        )
    res = results.get("resources")
    if res:
        mb = 1 << 20
        parts.append(f"<h2>Resources ({_esc(res.get('bound_text'))})</h2>")
        parts.append(
            f"<p>{res.get('checked')} nodes checked; "
            f"{'within the bound' if res.get('ok') else 'FAILED'}</p>"
        )
        parts.append(
            _table(
                [
                    (
                        n,
                        f"{e['baseline']['rss_bytes'] / mb:.1f}",
                        f"{e['end']['rss_bytes'] / mb:.1f}",
                        e["baseline"]["fds"],
                        e["end"]["fds"],
                        e.get("violation") or e.get("why_not_checked") or "ok",
                    )
                    for n, e in sorted(res.get("nodes", {}).items())
                ],
                (
                    "node",
                    "RSS MB (baseline)",
                    "RSS MB (end)",
                    "open files (baseline)",
                    "open files (end)",
                    "verdict",
                ),
            )
        )
    if "linearizable" in result:
        parts.append(
            "<h2>Metadata linearizability</h2><pre>"
            + _esc(json.dumps(result["linearizable"], indent=1, default=str)[:20000])
            + "</pre>"
        )
    parts.append(
        "<h2>Final reads</h2><pre>"
        + _esc(json.dumps(results.get("final_reads_complete"), default=str))
        + "</pre></body></html>"
    )
    return "\n".join(parts)
