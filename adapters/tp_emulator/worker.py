"""A non-leader rank of the TP emulator: ``python -m qconform.adapters.tp_emulator.worker``.

Started by :class:`qconform.adapters.tp_emulator.group.RankGroup`. It connects to
the leader's TCPStore, registers as ready, joins the process group and serves
batches until the leader says ``stop``. It exits if its parent (the leader) goes
away, so no rank outlives the adapter process.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import timedelta
from typing import Sequence

import torch.distributed as dist

from .group import LOCALHOST, STARTUP_TIMEOUT_S, join, serve


def watch_parent(parent: int) -> None:
    """Exit at once when the leader process is gone (a backstop to the closed connections)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qconform.adapters.tp_emulator.worker")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, required=True, help="work-group collective timeout, seconds")
    parser.add_argument("--parent", type=int, required=True, help="the leader's process id")
    args = parser.parse_args(argv)
    threading.Thread(target=watch_parent, args=(args.parent,), daemon=True).start()
    store = dist.TCPStore(  # pyright: ignore[reportPrivateImportUsage]  # torch.distributed re-exports it from C without listing it in __all__
        LOCALHOST, args.port, args.world, is_master=False, timeout=timedelta(seconds=STARTUP_TIMEOUT_S)
    )
    store.set(f"ready/{args.rank}", "1")
    serve(join(store, args.rank, args.world, args.device, args.timeout))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
