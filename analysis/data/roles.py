"""Three kinds of text, never mixed: map tokens, choice tokens and held-out tokens.

A figure used to choose a plan is never the figure that reports how the plan will do on new text:
- **map** tokens: the sensitivity map and everything predicted from it;
- **choice** tokens: Verify and any other comparison used to pick between plans;
- **held-out** tokens: what a plan does on new text; never used to choose anything.

Bundled text: map = the validation split's first MAP_TOKENS tokens (what the shipped maps measured); choice =
the validation split's next CHOICE_TOKENS tokens, starting right after the map's; held-out = the test split's
first HELD_OUT_TOKENS tokens. A stretch is (split, start, tokens), so two stretches of one split are disjoint
when their [start, start + tokens + 1) ranges do not meet (perplexity reads one token past the last target).

A user's own text (or a local corpus): its documents (split at the bundled separator, else at blank lines) are
dealt in order, whole, into the three roles by their token counts: the first documents until MAP_SHARE of the
tokens → map, the next until MAP_SHARE + CHOICE_SHARE → choice, the rest → held-out. Whole documents, in
order: a role never shares a document with another, and held-out text is a different stretch of the corpus.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from analysis.errors import AnalysisError

MAP_TOKENS = 4_096        # the shipped maps' tokens (the map's eval_tokens)
CHOICE_TOKENS = 16_384    # Verify's tokens
HELD_OUT_TOKENS = 16_384  # `ppl --split test --max-tokens 16384 --context 256`
CONTEXT = 256
MAP_SHARE, CHOICE_SHARE = 0.2, 0.4  # a user text: the rest (0.4) is held out


class TextRole(str, Enum):
    MAP = "map"
    CHOICE = "choice"
    HELD_OUT = "held-out"

    @property
    def purpose(self) -> str:
        return {"map": "the sensitivity map and its predictions", "choice": "choosing between plans",
                "held-out": "what a plan does on new text (never used to choose)"}[self.value]


@dataclass(frozen=True)
class TokenStretch:
    """`tokens` scored tokens of a bundled split from token `start` (targets start+1 .. start+tokens)."""
    role: TextRole
    split: str
    start: int
    tokens: int
    context: int = CONTEXT

    @property
    def end(self) -> int:
        """One past the last token read (inputs and targets)."""
        return self.start + self.tokens + 1

    def overlaps(self, other: TokenStretch) -> bool:
        return self.split == other.split and self.start < other.end and other.start < self.end

    def ids(self, tokenizer):
        from analysis.data.corpus import encoded_split
        return encoded_split(self.split, tokenizer)[self.start:self.end]

    def label(self, scored: int | None = None) -> str:
        """"held-out tokens: Shakespeare … test split, tokens 0–16,384 (16,384 scored), context 256"."""
        from analysis.data.corpus import dataset_label
        n = self.tokens if scored is None else scored
        return (f"{self.role.value} tokens: {dataset_label(self.split)}, tokens {self.start:,}–{self.start + n:,} "
                f"({n:,} scored), context {self.context}")

    def as_dict(self) -> dict:
        return {"role": self.role.value, "split": self.split, "start": self.start, "tokens": self.tokens,
                "context": self.context}


def map_stretch(tokens: int = MAP_TOKENS, split: str = "validation", context: int = CONTEXT) -> TokenStretch:
    return TokenStretch(TextRole.MAP, split, 0, tokens, context)


def choice_stretch(map_tokens: int = MAP_TOKENS, tokens: int = CHOICE_TOKENS, split: str = "validation",
                   context: int = CONTEXT) -> TokenStretch:
    """Right after the map's tokens (and the one extra token the map's last target reads)."""
    return TokenStretch(TextRole.CHOICE, split, map_stretch(map_tokens, split).end, tokens, context)


def held_out_stretch(tokens: int = HELD_OUT_TOKENS, context: int = CONTEXT) -> TokenStretch:
    return TokenStretch(TextRole.HELD_OUT, "test", 0, tokens, context)


def bundled_roles(map_tokens: int = MAP_TOKENS, choice_tokens: int = CHOICE_TOKENS,
                  held_out_tokens: int = HELD_OUT_TOKENS, context: int = CONTEXT) -> dict[TextRole, TokenStretch]:
    """The three roles on the bundled text; disjoint by construction (checked, so a future change cannot mix them)."""
    roles = {TextRole.MAP: map_stretch(map_tokens, context=context),
             TextRole.CHOICE: choice_stretch(map_tokens, choice_tokens, context=context),
             TextRole.HELD_OUT: held_out_stretch(held_out_tokens, context)}
    check_disjoint(list(roles.values()))
    return roles


def check_disjoint(stretches: list[TokenStretch]) -> None:
    for i, a in enumerate(stretches):
        for b in stretches[i + 1:]:
            if a.overlaps(b):
                raise AnalysisError(f"The {a.role.value} and {b.role.value} tokens overlap ({a.split} tokens "
                                    f"{a.start}–{a.end} and {b.start}–{b.end}); a figure used to choose must never "
                                    "be the one that reports.")


def documents(text: str) -> list[str]:
    """The bundled separator splits documents; a text without it is split at blank lines."""
    from analysis.data.corpus import SEPARATOR
    parts = text.split(SEPARATOR) if SEPARATOR in text else re.split(r"\n\s*\n", text)
    return [p for p in parts if p.strip()]


def text_roles(text: str, tokenizer) -> dict[TextRole, list[int]]:
    """A user's text split by whole documents into the three roles: role → the document indices it holds
    (see the module docstring). Needs at least three documents."""
    docs = documents(text)
    if len(docs) < 3:
        raise AnalysisError(f"The text has {len(docs)} document(s); map, choice and held-out text need at least "
                            "three (separate documents with a blank line).")
    from analysis.data.corpus import encode
    sizes = [len(encode(d, tokenizer)) for d in docs]
    total, done = sum(sizes), 0
    out: dict[TextRole, list[int]] = {r: [] for r in TextRole}
    for i, n in enumerate(sizes):
        share = done / total
        left = len(docs) - i
        if not out[TextRole.MAP] or (share < MAP_SHARE and left > 2):
            role = TextRole.MAP
        elif not out[TextRole.CHOICE] or (share < MAP_SHARE + CHOICE_SHARE and left > 1):
            role = TextRole.CHOICE
        else:
            role = TextRole.HELD_OUT
        out[role].append(i)
        done += n
    return out


def role_part(text: str, tokenizer, role: TextRole) -> tuple[str, str]:
    """(the documents of `role` joined by the bundled separator, a label naming them), e.g. "held-out documents
    8–10 of 10 (whole documents in order: about 20 % map, 40 % choice, the rest held-out)"."""
    from analysis.data.corpus import SEPARATOR
    docs, held = documents(text), text_roles(text, tokenizer)[role]
    which = f"{held[0] + 1}" if len(held) == 1 else f"{held[0] + 1}–{held[-1] + 1}"
    label = (f"{role.value} document{'s' if len(held) > 1 else ''} {which} of {len(docs)} (whole documents in "
             f"order: about {MAP_SHARE:.0%} map, {CHOICE_SHARE:.0%} choice, the rest held-out)")
    return SEPARATOR.join(docs[i] for i in held), label
