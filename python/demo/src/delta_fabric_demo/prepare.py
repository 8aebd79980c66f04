"""``python -m delta_fabric_demo.prepare DIR --nodes N``: the files that demo nodes start from.

Writes what ``delta-fabric demo`` writes before it starts its nodes, for nodes that you start yourself
(``python -m delta_fabric_demo.node`` and the Rust ``df-node``, e.g. on several machines, see
docs/clusters.md):

- ``DIR/node{i}/``: the training partition of node ``i`` (``--partition skewed`` by default) and the
  shared test set, in the format of `delta_fabric_demo.data`;
- ``DIR/full/``: the whole training set;
- ``DIR/init.f32``: the initial canonical weights every node starts from (raw little-endian f32; with
  the BatchNorm running statistics when ``--include-buffers``);
- ``DIR/manifest.json``: the manifest of those weights.

The output depends only on the options (and the PyTorch version, for ``init.f32``): two machines that
run the same command get the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from delta_fabric.cli_support import HelpFormatter, one_line_errors
from delta_fabric.extras import MissingExtraError, raise_missing_extra

if TYPE_CHECKING:
    from delta_fabric.manifest import Manifest

    from delta_fabric_demo.data import Split

__all__ = ["main", "prepare"]


def prepare(
    out: Path, nodes: int, *, partition: str = "skewed", seed: int = 0, include_buffers: bool
) -> tuple[Path, list[Split], Manifest]:
    """Writes the partitions, ``init.f32`` and ``manifest.json`` under ``out``; returns the path of
    ``init.f32``, the training partitions and the manifest."""
    from delta_fabric_demo.data import load_split, write_partition
    from delta_fabric_demo.data import partition as split_train
    from delta_fabric_demo.model import init_model, save_canonical

    digits = load_split(seed)
    parts = split_train(digits.train, nodes, partition, seed)
    for i, part in enumerate(parts):
        write_partition(out / f"node{i}", part, digits.test)
    write_partition(out / "full", digits.train, digits.test)
    init_path = out / "init.f32"
    manifest = save_canonical(init_model(seed), include_buffers, init_path)
    (out / "manifest.json").write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return init_path, parts, manifest


def _positive(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m delta_fabric_demo.prepare",
        description="Write the data partitions and initial weights of demo nodes into DIR.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("dir", type=Path, help="output directory (created)")
    p.add_argument("--nodes", type=_positive, required=True, help="number of partitions")
    p.add_argument(
        "--partition", choices=("skewed", "iid"), default="skewed", help="how to split the data"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the initial weights")
    p.add_argument(
        "--include-buffers",
        action="store_true",
        help="init.f32 holds the BatchNorm running statistics too (for nodes run with it)",
    )
    one_line_errors(p)
    args = p.parse_args(argv)
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        init, _, _ = prepare(
            args.dir,
            args.nodes,
            partition=args.partition,
            seed=args.seed,
            include_buffers=args.include_buffers,
        )
    except ModuleNotFoundError as exc:  # torch or scikit-learn: the demo's dependencies
        try:
            raise_missing_extra(exc, p.prog)
        except MissingExtraError as missing:
            print(f"{p.prog}: error: {missing}", file=sys.stderr)
            return 2
    except OSError as exc:
        print(f"{p.prog}: {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.nodes} partitions and {init}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
