"""One node of tests/test_fault_pacing.py (not a test module): a Zenoh node on tcp/127.0.0.1 that trains
a quadratic towards a target shared by every node, paces on its live peers (DF-ZEN-156) and
prints one JSON line per step: ``{"t": monotonic seconds, "step": n, "loss": RMS distance of its
weights to the target, "live": the peers its transport saw live when it began to wait,
"held_by": the peers that held its pacing back then (`Fabric.pace_blockers`), "paced": seconds it waited}``. It stops at the given ``time.monotonic()`` reading (bounded).

usage: fault_pacing_node.py NODE_ID NAMESPACE LISTEN_PORT CONNECT_PORTS(comma, may be empty) END JOIN(0/1)
(END: the time.monotonic() reading at which to stop, the same clock in every process)
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from delta_fabric.config import SyncConfig
from delta_fabric.fabric import Fabric
from delta_fabric.stores.numpy import NumpyStore
from delta_fabric.transports.zenoh import ZenohOptions, ZenohTransport

N = 256
TARGET = np.random.default_rng(0).normal(size=N).astype(np.float32)
LR = 0.05 / 4  # four nodes add each other's deltas
STEP_S = 0.01  # the emulated compute of one step
PEER_DEADLINE = 5.0


def main() -> None:
    node_id, ns, listen, connect, end_s, join = sys.argv[1:7]
    t0 = time.monotonic()
    nid = int(node_id)
    ports = [p for p in connect.split(",") if p]
    options = ZenohOptions(
        node_id=nid,
        namespace=ns,
        listen=[f"tcp/127.0.0.1:{listen}"],
        connect=[f"tcp/127.0.0.1:{p}" for p in ports],
    )
    w = np.zeros(N, np.float32)
    store = NumpyStore({"w": w})
    transport = ZenohTransport(options)
    cfg = SyncConfig.v1_0(ratio=0.25, sync_interval=1)
    fabric = Fabric.v1_0(
        store,
        transport,
        cfg,
        node_id=nid,
        bootstrap=join == "1",
        bootstrap_timeout=20.0,
        own_transport=True,
    )
    if join != "1":  # the first four start together: no delta is published before all listen
        transport.wait_for_peers(3, 30.0)
    end = float(end_s)
    step = 0
    ready = {"event": "ready", "t": time.monotonic(), "start_s": time.monotonic() - t0}
    print(json.dumps({**ready, "bootstrapped": fabric.bootstrapped}), flush=True)
    while time.monotonic() < end:
        w -= np.float32(LR) * (w - TARGET)
        time.sleep(STEP_S)
        fabric.step()
        live = sorted(transport.peers())  # seen at the same moment as held_by
        held_by = sorted(fabric.pace_blockers(2, peer_deadline=PEER_DEADLINE))
        paced = fabric.pace(2, peer_deadline=PEER_DEADLINE, timeout=10.0)
        step += 1
        loss = float(np.sqrt(np.mean((w - TARGET) ** 2)))
        line = {
            "t": time.monotonic(),
            "step": step,
            "loss": loss,
            "live": live,
            "held_by": held_by,
            "paced": paced,
        }
        print(json.dumps(line), flush=True)
    fabric.close()


if __name__ == "__main__":
    main()
