"""The dashboard's pages in one list: the sidebar's navigation (app.py) and the Model page's "Start here" both read
it, so the teaching order is the sidebar's order."""
from __future__ import annotations

from typing import NamedTuple


# The first screen's first sentence (the Model page, the app's home), before any table.
PURPOSE = ("This tool shows how many directions each head's recurrent state really uses in a linear-attention or "
           "state-space language model, and prunes the query/key channels or heads it does not need, measuring what "
           "the model loses.")


class PageEntry(NamedTuple):
    path: str
    title: str
    icon: str
    group: str
    sentence: str   # what the page shows, in one plain sentence (Start here)


PAGES = (
    PageEntry("pages/model.py", "Model", ":material/view_in_ar:", "Inspect",
              "what the model is: its layers, heads and how big each head's state is."),
    PageEntry("pages/states.py", "States & rank", ":material/grid_on:", "Inspect",
              "how many independent directions each head's state really uses (its effective rank)."),
    PageEntry("pages/query_noise.py", "Query noise", ":material/graphic_eq:", "Inspect",
              "why a low-rank state turns a slightly wrong query into a wrong answer."),
    PageEntry("pages/state_lab.py", "State lab", ":material/science:", "Inspect",
              "type a sentence and watch one head's state fill up, token by token."),
    PageEntry("pages/importance.py", "Channel importance", ":material/balance:", "Shrink",
              "which key channels each pruning strategy would keep."),
    PageEntry("pages/prune.py", "Prune", ":material/content_cut:", "Shrink",
              "remove key channels and measure what the model loses."),
    PageEntry("pages/sweep.py", "Sweep & latency", ":material/show_chart:", "Shrink",
              "quality and speed against how much is pruned."),
)


def groups() -> dict[str, list[PageEntry]]:
    """{group: its pages in order}, groups in the order they first appear."""
    out: dict[str, list[PageEntry]] = {}
    for page in PAGES:
        out.setdefault(page.group, []).append(page)
    return out
