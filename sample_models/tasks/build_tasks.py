"""Build the local lm-evaluation-harness tasks from the bundled texts (no network, deterministic).

    .venv/bin/python sample_models/tasks/build_tasks.py            # rewrites the YAML, JSONL and tasks.json here
    .venv/bin/python sample_models/tasks/build_tasks.py --out DIR  # writes them into DIR instead (tests compare)

Each task is named for what it is, not after a benchmark it is not (sample_models/tasks/README.md):
  * shakespeare_last_word, wikipedia_last_word: LAMBADA-style last-word cloze. A passage ends with the last word
    of a sentence or clause (before . ! ? ; or :); the model must produce that word (greedy, every token). The
    word has 3+ letters, is not among the train split's 150 most frequent words, and occurs earlier in the passage
    (as in most LAMBADA passages, so the task leans on recall of the context). No human filtering, unlike LAMBADA.
  * shakespeare_next_line: multiple choice, the true next line of a speech among 4 lines of the same play of
    similar length (chance 25 %).
  * shakespeare_word_order: multiple choice, the true next line among 3 copies of it with two neighbouring words
    swapped (the same words and bytes, so only word order tells them apart; chance 25 %).
  * associative_recall_{16,32,64}_pairs: the multi-query associative recall sequences of analysis.data.recall as
    words (k<i> / v<j>, analysis.data.recall_text); the value stored with the last key must follow it.
Test docs come from held-out text (Hamlet, Othello, Richard III; the Wikipedia slice's articles but its last
ten); few-shot docs from other text (Twelfth Night; the last ten articles; recall sequences of another seed).
Docs are in random order (seeded), so the harness's --limit N (the first N docs) is a random sample.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: analysis.data reads the bundled texts

from analysis.data import corpus  # noqa: E402
from analysis.data.recall import RecallTask, recall_batch  # noqa: E402
from analysis.data.recall_text import to_text  # noqa: E402

WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
CLAUSE_END = re.compile(r"[.!?;:]")
ACT_ONE = re.compile(r"^ACT I\.\s*$", re.M)   # a play's text starts here (the cast list before it is not spoken)
HEADING = re.compile(r"^(ACT|SCENE|Scene)\b")
STOP_WORDS = 150           # the train split's most frequent words are never targets
CLOZE_WORDS = (40, 110)    # words in a cloze passage before its target (at least, at most)
CLOZE_DOCS, CLOZE_FEWSHOT = 1000, 64
LINE_WORDS = 4             # a next-line target and its distractors have at least this many words
LINE_CONTEXT = (30, 90)    # words of context before the true next line
LINE_DOCS, LINE_FEWSHOT = 1000, 64
LINE_CHOICES, LINE_AWAY, LINE_LENGTH = 4, 100, 0.25  # distractors: ≥ 100 lines away, length within ±25 %
ORDER_WORDS = 6            # a word-order target has at least this many words (enough distinct shuffles)
RECALL_PAIRS, RECALL_KEYS, RECALL_DOCS, RECALL_FEWSHOT = (16, 32, 64), 128, 300, 32
WIKI_FEWSHOT_ARTICLES = 10
SEED = 0


def documents(split: str) -> list[str]:
    return corpus.load_text(split).split(corpus.SEPARATOR)


def plays(split: str) -> list[str]:
    """The Shakespeare works of a split from their first act on, title line kept (a `source` for each doc)."""
    out = []
    for doc in documents(split):
        act = ACT_ONE.search(doc)
        out.append(doc.split("\n", 1)[0] + "\n\n" + doc[act.start():] if act else doc)
    return out


def stop_words() -> set[str]:
    counts = collections.Counter(w.lower() for w in WORD.findall(corpus.load_text("train")))
    return {w for w, _ in counts.most_common(STOP_WORDS)}


# ---- last-word cloze -------------------------------------------------------------------------------------

def _is_heading(line: str) -> bool:
    """A speaker heading ("Hor.", "First Clown.") or a stage direction ("[Exit.]"), not spoken text."""
    s = line.strip()
    return s.startswith("[") or bool(HEADING.match(s)) or (
        s.endswith(".") and len(WORD.findall(s)) <= 3 and s[:1].isupper() and not CLAUSE_END.search(s[:-1]))


def _start_of_passage(doc: str, pos: int) -> int:
    """Where a passage that must include `pos` starts: the start of its line or sentence, whichever is later."""
    line = doc.rfind("\n", 0, pos) + 1
    sentence = max(doc.rfind(". ", 0, pos), doc.rfind("! ", 0, pos), doc.rfind("? ", 0, pos))
    return max(line, sentence + 2 if sentence >= 0 else 0)


def cloze_candidates(doc: str, stop: set[str]) -> list[dict]:
    words = list(WORD.finditer(doc))
    found, after = [], 0
    for i in range(CLOZE_WORDS[0], len(words)):
        m = words[i]
        word = m.group()
        if len(word) < 3 or word.lower() in stop or m.start() < after:
            continue
        if not CLAUSE_END.match(doc, m.end()) or not doc[m.start() - 1].isspace():
            continue  # the last word of a sentence or clause, after whitespace (so the target is "<space>word")
        line_start = doc.rfind("\n", 0, m.start()) + 1
        line = doc[line_start:doc.find("\n", m.end()) if "\n" in doc[m.end():] else len(doc)]
        if _is_heading(line) or len(WORD.findall(line)) < LINE_WORDS:
            continue
        start = _start_of_passage(doc, words[i - CLOZE_WORDS[0]].start())
        context = doc[start:m.start()]
        before = [w.lower() for w in WORD.findall(context)]
        if len(before) > CLOZE_WORDS[1] or word.lower() not in before:
            continue
        stripped = context.rstrip()
        found.append({"context": stripped, "target": context[len(stripped):] + word, "word": word})
        after = m.end()  # passages never share a target; the next one ends after this one
    return found


def cloze_docs(docs: list[str], n: int, stop: set[str], seed: int) -> list[dict]:
    pool = []
    for doc in docs:
        title = doc.split("\n", 1)[0].strip()
        pool += [{**c, "source": title} for c in cloze_candidates(doc, stop)]
    rng = random.Random(seed)
    return [pool[i] for i in rng.sample(range(len(pool)), min(n, len(pool)))]  # random order: --limit N is a sample


# ---- next line, multiple choice --------------------------------------------------------------------------

def _spoken(line: str) -> bool:
    return bool(line.strip()) and not _is_heading(line)


def line_pool(docs: list[str]) -> list[tuple]:
    """(title, context, true next line, lines of the same play like it) for every line that continues a speech
    after 30-90 words of context."""
    pool = []
    for doc in docs:
        title = doc.split("\n", 1)[0].strip()
        lines = doc.split("\n")
        spoken = [i for i, line in enumerate(lines) if _spoken(line) and len(WORD.findall(line)) >= LINE_WORDS]
        for i in spoken:
            if not _spoken(lines[i - 1]):
                continue  # the target continues a speech: the line before it is spoken text too
            start, words = i, 0
            while start > 0 and words < LINE_CONTEXT[0]:
                start -= 1
                words += len(WORD.findall(lines[start]))
            if words < LINE_CONTEXT[0] or words > LINE_CONTEXT[1]:
                continue
            true = lines[i].strip()
            alike = [lines[j].strip() for j in spoken if abs(j - i) > LINE_AWAY
                     and abs(len(lines[j].strip()) - len(true)) <= LINE_LENGTH * len(true) and lines[j].strip() != true]
            alike = sorted(set(alike))
            if len(alike) < LINE_CHOICES - 1:
                continue
            pool.append((title, "\n".join(lines[start:i]).strip("\n"), true, alike))
    return pool


def next_line_docs(docs: list[str], n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pool = line_pool(docs)
    out = []
    for k in rng.sample(range(len(pool)), min(n, len(pool))):  # random order: --limit N is a sample
        title, context, true, alike = pool[k]
        choices = rng.sample(alike, LINE_CHOICES - 1) + [true]
        rng.shuffle(choices)
        out.append({"context": context, "choices": choices, "label": choices.index(true), "source": title})
    return out


def swapped(line: str, j: int) -> str:
    """The line with its words j and j+1 swapped (the first word and the final punctuation stay in place)."""
    words = line.split()
    tail = re.search(r"[^A-Za-z']*$", words[-1]).group()
    words[-1] = words[-1][:len(words[-1]) - len(tail)]
    words[j], words[j + 1] = words[j + 1], words[j]
    return " ".join(words) + tail


def word_order_docs(docs: list[str], n: int, seed: int) -> list[dict]:
    """The true next line against copies of it with two neighbouring words swapped: same words, same bytes."""
    rng = random.Random(seed)
    pool = [row for row in line_pool(docs) if len(row[2].split()) >= ORDER_WORDS]
    out = []
    for k in rng.sample(range(len(pool)), min(n, len(pool))):  # random order: --limit N is a sample
        title, context, true, _ = pool[k]
        swaps = {swapped(true, j) for j in range(1, len(true.split()) - 1)} - {true}
        if len(swaps) < LINE_CHOICES - 1 or not WORD.search(true.split()[-1]):  # the last word has letters
            continue
        choices = [true] + rng.sample(sorted(swaps), LINE_CHOICES - 1)
        rng.shuffle(choices)
        out.append({"context": context, "choices": choices, "label": choices.index(true), "source": title})
    return out


# ---- associative recall ----------------------------------------------------------------------------------

def recall_docs(pairs: int, n: int, seed: int) -> list[dict]:
    import torch
    task = RecallTask(n_keys=RECALL_KEYS, n_values=RECALL_KEYS, n_pairs=pairs, n_queries=pairs)
    ids, _ = recall_batch(task, n, torch.Generator().manual_seed(seed))
    rng = random.Random(seed)
    out = []
    for row in ids.tolist():
        asked = rng.randrange(pairs)  # which query is scored: after `asked` answered ones
        end = 2 * pairs + 2 * asked + 1
        out.append({"context": to_text(row[:end], task), "target": " " + to_text(row[end:end + 1], task),
                    "pairs": pairs, "query": asked})
    return out


# ---- writing ---------------------------------------------------------------------------------------------

def write_jsonl(path: Path, splits: dict[str, list[dict]]) -> str:
    text = "".join(json.dumps({"split": split, **doc}, ensure_ascii=False, sort_keys=True) + "\n"
                   for split, docs in splits.items() for doc in docs)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


CLOZE_YAML = """\
output_type: loglikelihood
doc_to_text: context
doc_to_target: target
target_delimiter: ""
fewshot_delimiter: "\\n\\n"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
CHOICE_YAML = """\
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: label
target_delimiter: "\\n"
fewshot_delimiter: "\\n\\n"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


def write_yaml(path: Path, name: str, what: str, body: str) -> None:
    path.write_text(f"# {what}\n# Built by build_tasks.py from the bundled data (README.md); do not edit by hand.\n"
                    f"task: {name}\ncustom_dataset: !function local_data.load\ndataset_kwargs:\n"
                    f"  data_file: {name}.jsonl\ntest_split: test\nfewshot_split: validation\n{body}"
                    "metadata:\n  version: 1.0\n", encoding="utf-8")


def build(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    stop = stop_words()
    wiki = documents("wiki")
    plays_source = "Shakespeare test split (Hamlet, Othello, Richard III) from Act I on; few-shot: Twelfth Night"
    cloze = ("last-word cloze: the passage's last word ({} letters or more, not among the train split's {} most "
             "frequent words, also earlier in the passage) after 40-110 words of {}").format(3, STOP_WORDS, "{}")
    cloze_chance = (0.0, "about 0: an open-vocabulary word that must come out greedily, every token")
    tasks = {
        "shakespeare_last_word": ({"test": cloze_docs(plays("test"), CLOZE_DOCS, stop, SEED),
                                   "validation": cloze_docs(plays("validation"), CLOZE_FEWSHOT, stop, SEED)},
                                  plays_source, cloze.format("held-out Shakespeare"), CLOZE_YAML, cloze_chance),
        "wikipedia_last_word": ({"test": cloze_docs(wiki[:-WIKI_FEWSHOT_ARTICLES], CLOZE_DOCS, stop, SEED),
                                 "validation": cloze_docs(wiki[-WIKI_FEWSHOT_ARTICLES:], CLOZE_FEWSHOT, stop, SEED)},
                                f"Wikipedia slice but its last {WIKI_FEWSHOT_ARTICLES} articles; few-shot: those",
                                cloze.format("Wikipedia"), CLOZE_YAML, cloze_chance),
        "shakespeare_next_line": ({"test": next_line_docs(plays("test"), LINE_DOCS, SEED),
                                   "validation": next_line_docs(plays("validation"), LINE_FEWSHOT, SEED)},
                                  plays_source, f"multiple choice: the true next line of a speech among "
                                  f"{LINE_CHOICES} lines of the same play of similar length, after 30-90 words",
                                  CHOICE_YAML, (1 / LINE_CHOICES, f"1/{LINE_CHOICES}: one line of {LINE_CHOICES}")),
        "shakespeare_word_order": ({"test": word_order_docs(plays("test"), LINE_DOCS, SEED),
                                    "validation": word_order_docs(plays("validation"), LINE_FEWSHOT, SEED)},
                                   plays_source, f"multiple choice: the true next line of a speech ({ORDER_WORDS}+ "
                                   f"words) among {LINE_CHOICES - 1} copies with two neighbouring words swapped "
                                   "(same words, same bytes; the first word stays), after 30-90 words",
                                   CHOICE_YAML, (1 / LINE_CHOICES, f"1/{LINE_CHOICES}: one order of {LINE_CHOICES}")),
    }
    for pairs in RECALL_PAIRS:
        tasks[f"associative_recall_{pairs}_pairs"] = (
            {"test": recall_docs(pairs, RECALL_DOCS, SEED + pairs),
             "validation": recall_docs(pairs, RECALL_FEWSHOT, SEED + 1000 + pairs)},
            f"synthetic (analysis.data.recall, seed {SEED + pairs}; few-shot seed {SEED + 1000 + pairs})",
            f"associative recall: {pairs} key-value pairs over {RECALL_KEYS} keys and values written as words "
            "(k<i> v<j>), some asked again; the value stored with the last key must follow it",
            CLOZE_YAML, (1 / RECALL_KEYS, f"1/{RECALL_KEYS}: a value guessed uniformly"))
    manifest = {}
    for name, (splits, source, what, body, (chance, chance_note)) in tasks.items():
        digest = write_jsonl(out / f"{name}.jsonl", splits)
        write_yaml(out / f"{name}.yaml", name, what, body)
        manifest[name] = {"what": what, "docs": len(splits["test"]), "fewshot_docs": len(splits["validation"]),
                          "source": source, "chance": chance, "chance_note": chance_note,
                          "recall_keys": RECALL_KEYS if name.startswith("associative_recall") else None,
                          "jsonl_sha256": digest}
    (out / "tasks.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the YAML and JSONL files and tasks.json")
    for name, row in build(parser.parse_args().out).items():
        print(f"{name}: {row['docs']} docs, {row['fewshot_docs']} few-shot docs, sha256 {row['jsonl_sha256'][:16]}")


if __name__ == "__main__":
    main()
