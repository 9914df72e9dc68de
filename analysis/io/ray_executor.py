"""Points as Ray tasks (analysis.io.points): one task per point, results streamed back as they finish.

Without an address a local Ray is started with this machine's cores; with one (`host:port` of a
`ray start --head`, `ray://host:port`, or `auto`) the existing cluster is joined. Each node needs this
repository at the same path and the project's environment (the workers import `analysis` and read the
bundled text). The driver keeps the cache: tasks only compute and return plain result dicts, so a point
is cached the moment its result arrives, in exactly the form the in-process executor writes.

Ray moves the model, tokenizer and calibration between its own processes with its own serializer, like
every Ray program: join only a cluster you trust (Ray's own rule). Nothing here reads a pickle from disk.
"""
from __future__ import annotations

import os
import socket

from analysis.errors import AnalysisError
from analysis.io.writes import show  # echoed input stays short: a 3,000-character address is cut

EXECUTORS = ("in-process", "ray")
MAX_RETRIES = 3           # a task whose worker process dies (killed, out of memory) is run again this often
CONNECT_TIMEOUT_S = 5.0
_INSTALL = "install it with `pip install ray==2.60.0` (the version pinned in requirements.txt)"
_started: dict = {}       # how this process's Ray was started: {"address": ...}


def check_executor(name: str) -> None:
    if name not in EXECUTORS:
        raise AnalysisError(f"Unknown executor {show(str(name), 60)!r}; use one of {', '.join(EXECUTORS)}.")


def import_ray():
    try:
        import ray
    except ImportError:
        raise AnalysisError(f"The ray executor needs the ray package, which is not installed here; {_INSTALL}, "
                            "or use the in-process executor.") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) to probe for `address`, None for `auto` (Ray finds a local cluster itself)."""
    if address == "auto":
        return None
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AnalysisError(f"Ray address {show(address)!r} is not host:port (or ray://host:port, or auto); give the "
                            "address `ray start --head` printed.")
    return host.strip("[]"), int(port)


def check_address(address: str) -> None:
    """One sentence when `address` is not host:port, ray://host:port or auto (nothing is contacted)."""
    _host_port(address)


def _probe(address: str) -> None:
    where = _host_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise AnalysisError(f"Cannot reach the Ray cluster at {show(address)} ({reason}); start it there with "
                            "`ray start --head`, check the host and port, or leave out --address to run a "
                            "local Ray on this machine.") from None


def connect(address: str | None = None, num_cpus: int | None = None):
    """The `ray` module, initialised: the cluster at `address`, or a local Ray with `num_cpus` (default: all
    of this machine's cores). Reuses this process's Ray when it was started the same way."""
    ray = import_ray()
    wanted = {"address": address, "num_cpus": None if address else (num_cpus or os.cpu_count() or 1)}
    if address:
        _probe(address)  # before leaving a Ray this process holds: an unreachable address changes nothing
    if ray.is_initialized():
        if _started == wanted:
            return ray
        ray.shutdown()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report to a server, ever
    from analysis.io.writes import REPO_ROOT
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                                      if p)}}
    try:
        if address:
            ray.init(address=address, runtime_env=env, log_to_driver=False, logging_level="ERROR")
        else:
            ray.init(num_cpus=wanted["num_cpus"], include_dashboard=False, runtime_env=env, log_to_driver=False,
                     logging_level="ERROR")
    except AnalysisError:
        raise
    except Exception as exc:  # ConnectionError, version mismatch, a cluster that refused us: one sentence
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        where = f"the Ray cluster at {show(address)}" if address else "a local Ray"
        raise AnalysisError(f"Could not start or join {where} ({first}); check the address and that the cluster "
                            "runs ray 2.60.0, or use the in-process executor.") from None
    _started.clear()
    _started.update(wanted)
    return ray


def task_options(ray, device: str) -> dict:
    """One GPU per task for a model on CUDA (refused when the cluster has none), else one CPU."""
    if device.startswith("cuda"):
        if ray.cluster_resources().get("GPU", 0) < 1:
            raise AnalysisError("The model is on a GPU but the Ray cluster has no GPUs; add GPU nodes, or load the "
                                "model with --device cpu.")
        return {"num_gpus": 1, "max_retries": MAX_RETRIES}
    return {"num_cpus": 1, "max_retries": MAX_RETRIES}


def get_result(ray, ref):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, AnalysisError):
            raise AnalysisError(str(cause)) from None
        if isinstance(cause, ImportError):  # a node without this repository (or its environment) at this path
            from analysis.io.writes import REPO_ROOT
            raise AnalysisError(f"A Ray worker cannot import the project ({cause}); put this repository at "
                                f"{REPO_ROOT} with its environment on every node of the cluster.") from None
        raise
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError) as exc:
        raise AnalysisError(f"A Ray worker died on every one of {1 + MAX_RETRIES} tries of a point "
                            f"({type(exc).__name__}); the node may be short of memory: use fewer tokens or a "
                            "smaller model, or a larger node.") from None
