"""``delta-fabric status``: the live nodes of a namespace, through liveliness and the info queryable.

It opens a plain Zenoh session (no liveliness token of its own: it is not counted as a node), asks
``NS/v1/alive/*`` for the live nodes and ``NS/v1/info/*`` for what each one reports (DF-ZEN-6: id,
framework, fingerprint, incarnation, N; the Python `Fabric` adds its counters as ``stats``), and prints a
table or, with ``--json``, one JSON document. A live node whose info did not answer in time is listed
with ``-`` in its columns. Endpoints come from the options, else from ``DELTA_FABRIC_CONNECT`` /
``DELTA_FABRIC_ZENOH_CONFIG`` (`delta_fabric.env`). In peer mode, give the endpoints of every node (the
join line of ``delta-fabric run`` lists them); through a router, the router's endpoint is enough. A
Zenoh peer answers for itself only (it does not forward other peers' liveliness and queries; routers
do), and gossip scouting, which would find the others, is off in DeltaFabric.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from delta_fabric.launch import (
    HelpFormatter,
    _endpoint_list,
    _positive_float,
    _positive_int,
    one_line_errors,
)

__all__ = ["add_arguments", "collect", "format_table", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    one_line_errors(p)
    p.formatter_class = HelpFormatter
    p.description = "List the live nodes of a namespace with their info and counters."
    p.add_argument(
        "--connect",
        type=_endpoint_list,
        default=None,
        help="comma list of endpoints of the cluster's nodes or router "
        "(default: DELTA_FABRIC_CONNECT)",
    )
    p.add_argument(
        "--zenoh-config",
        default=None,
        help="Zenoh JSON5 config file, used as is (default: DELTA_FABRIC_ZENOH_CONFIG)",
    )
    p.add_argument(
        "--namespace",
        default=None,
        help="cluster namespace (default: DELTA_FABRIC_NAMESPACE, else deltafabric/default)",
    )
    p.add_argument(
        "--timeout", type=_positive_float, default=2.0, help="seconds to wait for the answers"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--expect",
        type=_positive_int,
        default=None,
        help="exit 1 unless at least this many nodes are live",
    )


def collect(session: Any, namespace: str, timeout: float) -> list[dict[str, Any]]:
    """``[{"node": hex16, "alive": True, "info": {...} | None}]`` sorted by node id, from an open
    Zenoh session."""
    from delta_fabric.transports.zenoh import _parse_node, query_info

    live: set[int] = set()
    for reply in session.liveliness().get(f"{namespace}/v1/alive/*", timeout=timeout):
        ok = reply.ok
        if ok is not None:
            node = _parse_node(str(ok.key_expr))
            if node is not None:
                live.add(node)
    infos = query_info(session, f"{namespace}/v1/info/*", timeout)
    return [
        {
            "node": f"{n:016x}",
            "alive": n in live,
            "info": infos.get(n),
            "optional_encodings": optional_encodings(infos.get(n)),
        }
        for n in sorted(live | set(infos))
    ]


def optional_encodings(info: dict[str, Any] | None) -> str:
    """The OPTIONAL encodings a node receives, from its info's ``supports`` (DF-ZEN-231): e.g.
    ``"F16,BF16,Q8,PACKED"``; ``"none"`` for a node without the member (it receives only F32 and
    PLAIN, as 1.0 requires) or without any; ``"-"`` when its info did not answer. What an operator
    checks before configuring Q8 or PACKED (DF-VER-114)."""
    if not isinstance(info, dict):
        return "-"
    sup = info.get("supports")
    if not isinstance(sup, dict):
        return "none"
    names = [
        str(x)
        for key, required in (("encodings", "F32"), ("index_encodings", "PLAIN"))
        if isinstance(sup.get(key), list)
        for x in sup[key]
        if x != required
    ]
    return ",".join(names) or "none"


_COLUMNS = (
    ("node", lambda r: r["node"]),
    ("framework", lambda r: _info(r, "framework")),
    ("N", lambda r: _info(r, "N")),
    ("fingerprint", lambda r: str(_info(r, "fingerprint"))[:16]),
    ("incarnation", lambda r: _info(r, "incarnation")),
    ("optional_enc", lambda r: r.get("optional_encodings", "-")),
    ("steps", lambda r: _stat(r, "steps")),
    ("syncs", lambda r: _stat(r, "syncs")),
    ("sent_B", lambda r: _stat(r, "transport", "published_bytes")),
    ("recv_B", lambda r: _stat(r, "transport", "received_bytes")),
    ("drops", lambda r: _stat(r, "transport", "dropped_packets")),
    ("rejected", lambda r: _stat(r, "receive", "packets_rejected")),
)


def _info(row: dict[str, Any], key: str) -> object:
    info = row["info"]
    return "-" if not isinstance(info, dict) or key not in info else info[key]


def _stat(row: dict[str, Any], *path: str) -> object:
    cur: object = row["info"]
    for key in ("stats", *path):
        if not isinstance(cur, dict) or key not in cur:
            return "-"
        cur = cur[key]
    return cur


def misconfiguration(rows: list[dict[str, Any]]) -> list[str]:
    """One line per node that rejects a peer's packets for a configuration mismatch (its
    ``stats.misconfigured_peers``), and one when the live nodes do not share one fingerprint."""
    out = []
    for r in rows:
        peers = _stat(r, "misconfigured_peers")
        if isinstance(peers, dict):
            for peer, code in sorted(peers.items()):
                out.append(f"node {r['node']} rejects the packets of node {peer}: {code}")
    prints = {str(_info(r, "fingerprint")) for r in rows if _info(r, "fingerprint") != "-"}
    if len(prints) > 1:
        out.append(
            f"the live nodes have {len(prints)} different models (fingerprints "
            + ", ".join(sorted(p[:16] for p in prints))
            + "): nodes of different models do not sync"
        )
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    cells = [[name for name, _ in _COLUMNS]]
    cells += [[str(get(r)) for _, get in _COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def run(args: argparse.Namespace) -> int:
    from delta_fabric import env as dfenv
    from delta_fabric.transports.zenoh import ZenohOptions, _check_namespace

    if args.namespace is not None:
        try:
            _check_namespace(args.namespace)
        except ValueError as exc:
            print(f"delta-fabric status: error: --namespace: {exc}", file=sys.stderr)
            return 2
    if args.zenoh_config is not None and not os.path.isfile(args.zenoh_config):
        print(
            f"delta-fabric status: error: --zenoh-config {args.zenoh_config}: no such file",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    if args.connect is not None:
        env[dfenv.CONNECT] = ",".join(args.connect)
    if args.zenoh_config is not None:
        env[dfenv.ZENOH_CONFIG] = args.zenoh_config
    if args.namespace is not None:
        env[dfenv.NAMESPACE] = args.namespace
    env[dfenv.LISTEN] = ""  # status only connects
    try:
        options = ZenohOptions.from_env(1, env)
    except ValueError as exc:
        print(f"delta-fabric status: error: {exc}", file=sys.stderr)
        return 2
    if not options.connect and options.config_file is None:
        print(
            "delta-fabric status: error: give --connect ENDPOINTS or --zenoh-config FILE "
            "(or DELTA_FABRIC_CONNECT / DELTA_FABRIC_ZENOH_CONFIG)",
            file=sys.stderr,
        )
        return 2
    import zenoh

    try:
        session = zenoh.open(options.build_config())
    except Exception as exc:
        print(f"delta-fabric status: error: cannot open a Zenoh session: {exc}", file=sys.stderr)
        return 1
    try:
        rows = collect(session, options.namespace, args.timeout)
        reached = bool(rows) or bool(
            list(session.info.peers_zid()) or list(session.info.routers_zid())
        )
    finally:
        session.close()  # type: ignore[no-untyped-call]
    if not reached:
        where = ",".join(options.connect) or f"the endpoints of {options.config_file}"
        print(
            f"delta-fabric status: no Zenoh peer or router reached at {where} "
            f"within {args.timeout:g} s (is the cluster up, is the endpoint right?)",
            file=sys.stderr,
        )
        return 1
    try:
        if args.json:
            print(json.dumps({"namespace": options.namespace, "nodes": rows}, indent=2))
        else:
            print(f"namespace {options.namespace}: {len(rows)} live node(s)")
            if rows:
                print(format_table(rows))
            for line in misconfiguration(rows):
                print(f"warning: {line}")
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    if args.expect is not None and sum(r["alive"] for r in rows) < args.expect:
        print(f"delta-fabric status: fewer than --expect {args.expect} live nodes", file=sys.stderr)
        return 1
    return 0
