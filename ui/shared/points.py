"""The points a resumable job yields (a sweep, the latency sweep, the sensitivity map): a resumed job yields its
finished points again, so each is merged by its identity, never appended twice."""
from __future__ import annotations


def merged(points: list, point: dict, same) -> None:
    """Replace the point with the same identity (a resumed sweep yields finished points again) or append it."""
    for i, old in enumerate(points):
        if same(old, point):
            points[i] = point
            return
    points.append(point)
