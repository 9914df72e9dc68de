"""One executor for every multi-point workload: independent points (a prune plus a measurement each), computed
in-process one after another or as Ray tasks, through the one on-disk point cache either way.

A `Point` is its cache key (with the schema and expected values an entry must meet to be believed) and the
arguments that make it. `run_points(compute, points, shared, ...)` yields (index, result) as each point is
ready: a believed cache entry at once, else `compute(*shared, *point.args, cancel=...)`, stored under the key
the moment it is known. The driver alone reads and writes the cache (a Ray task only computes and returns a
plain dict), so a point computed on Ray is served from the cache in-process and back, and a run killed between
points resumes from what was stored.

`shared()` is called once, only when some point misses the cache (a calibration is never drawn for a run the
cache serves whole, nor for one where only the unpruned point misses); it gets exactly the points to compute and returns the tuple every point's computation shares (the
model, the tokenizer, the calibration, a baseline…). On Ray it is put in the object store once.

Stop: in-process, `cancel` (analysis.runtime.cancel) reaches inside each point and is checked between points;
on Ray it is checked between results and stopping cancels the outstanding tasks (a cancelled point is never
cached). `compute` must be a module-level function (Ray ships it by reference).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from analysis.errors import AnalysisError
from analysis.io import point_cache, ray_executor
from analysis.runtime.cancel import check


@dataclass(frozen=True)
class Executor:
    """Where points run: "in-process" (here, one after another) or "ray" (one task per point, on the cluster at
    `address`, default a local Ray with `num_cpus` cores)."""
    kind: str = "in-process"
    address: str | None = None
    num_cpus: int | None = None

    def __post_init__(self):
        ray_executor.check_executor(self.kind)
        if self.address and self.kind != "ray":
            raise AnalysisError(ADDRESS_WITHOUT_RAY)

    @property
    def on_ray(self) -> bool:
        return self.kind == "ray"

    def connect(self):
        """The initialised `ray` module (None in-process): call it before anything is written, so a cluster that
        cannot be reached is one sentence and no file."""
        return ray_executor.connect(self.address, self.num_cpus) if self.on_ray else None


IN_PROCESS = Executor()
ADDRESS_WITHOUT_RAY = "--address is the Ray cluster to run on: add --executor ray, or drop --address."


@dataclass(frozen=True)
class Point:
    key: dict                       # the cache key (model identity, settings, the point)
    schema: dict                    # fields a cached result must hold, typed (point_cache.lookup)
    expect: dict | None = None      # values a cached result must equal (the point it claims to be)
    args: tuple = field(default=())  # compute's own arguments for this point (small: they travel per task)


def run_points(compute: Callable, points: list[Point], shared: Callable[[list[Point]], tuple], *,
               executor: Executor = IN_PROCESS, device: str = "cpu", use_cache: bool = True,
               cancel=None) -> Iterator[tuple[int, dict]]:
    """Yield (index in `points`, result) for every point: in-process in order; on Ray the cached ones first, then
    the others as their tasks finish. Each result is marked `cached` True or False (point_cache)."""
    if not executor.on_ray:
        yield from _in_process(compute, points, shared, use_cache, cancel)
        return
    ray = executor.connect()
    todo = []
    for i, p in enumerate(points):
        hit = point_cache.lookup(p.key, p.schema, p.expect) if use_cache else None
        if hit is None:
            todo.append(i)
        else:
            yield i, hit
    if todo:
        yield from _on_ray(ray, compute, points, todo, shared, device, cancel)


def _in_process(compute, points, shared, use_cache, cancel):
    # every entry is looked up first, so `shared` gets exactly the points that miss (not every point after the
    # first miss: a cached plan behind a missing unpruned point must not make it draw a calibration)
    hits = [point_cache.lookup(p.key, p.schema, p.expect) if use_cache else None for p in points]
    held = None
    for i, p in enumerate(points):
        check(cancel)
        if hits[i] is not None:
            yield i, hits[i]
            continue
        if held is None:
            held = shared([q for q, hit in zip(points[i:], hits[i:]) if hit is None])
        yield i, point_cache.store(p.key, compute(*held, *p.args, cancel=cancel))


def _on_ray(ray, compute, points, todo: list[int], shared, device: str, cancel):
    options = ray_executor.task_options(ray, device)
    remote = ray.remote(_point_task).options(**options)
    refs = tuple(ray.put(x) for x in shared([points[i] for i in todo]))
    pending = {remote.remote(compute, *refs, *points[i].args): i for i in todo}
    try:
        while pending:
            check(cancel)
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)  # wakes to honour Stop between results
            for ref in done:
                i = pending.pop(ref)
                yield i, point_cache.store(points[i].key, ray_executor.get_result(ray, ref))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def _point_task(compute, *args):
    """One point on a Ray worker: this process gets the CPU path for fla's ops and the project's model types first."""
    from analysis.archs.install import ready
    ready()
    return compute(*args, cancel=None)
