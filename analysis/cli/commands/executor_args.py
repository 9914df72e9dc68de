"""--executor / --address: where a command's points run (analysis.io.points), the same flags on every command."""
from __future__ import annotations


def add_executor_args(p) -> None:
    from analysis.io.ray_executor import EXECUTORS
    p.add_argument("--executor", choices=list(EXECUTORS), default="in-process",
                   help="in-process (default): one point after another here; ray: one Ray task per point, on a "
                        "local Ray with this machine's cores or on the cluster at --address (one GPU per point "
                        "for a model on CUDA; docs/executor.md)")
    p.add_argument("--address", help="with --executor ray: the cluster to join (host:port from `ray start --head`, "
                                     "ray://host:port, or auto)")


def executor_of(args, connect: bool = True):
    """The Executor of the flags; --address without --executor ray, or a cluster that cannot be reached, is one
    sentence before any work (connect: join or start Ray now, before the model loads)."""
    from analysis.io.points import Executor
    executor = Executor(args.executor, args.address or None)
    if connect:
        executor.connect()
    return executor
