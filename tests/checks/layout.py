#!/usr/bin/env python3
"""The header layout of docs/architecture.md, generated from the tree: one row per header under
include/steptrace/, with the first sentence of the header's own opening comment.

    layout.py              print the block
    layout.py --check      exit 1 when docs/architecture.md's block (between the layout markers)
                           differs from the tree: a header added, removed, moved or re-described
    layout.py --write      rewrite that block in place
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "architecture.md")
BEGIN, END = "<!-- layout:begin (tests/checks/layout.py --write) -->", "<!-- layout:end -->"
WIDTH = 47


def first_sentence(path):
    """The header's opening comment up to its first full stop, without the "// steptrace/x.hpp - " lead."""
    words = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("//"):
                break
            words.append(line[2:].strip())
    text = re.sub(r"^steptrace/\S+\s+-\s+", "", " ".join(words))
    m = re.search(r"^(.*?[.:])(\s|$)", text)
    sentence = (m.group(1) if m else text).rstrip(":.")
    return sentence if len(sentence) <= 140 else sentence[:137].rstrip() + "..."


def block():
    rows = []
    base = os.path.join(ROOT, "include", "steptrace")
    for directory, _, files in sorted(os.walk(base)):
        for name in sorted(f for f in files if f.endswith(".hpp")):
            rel = os.path.relpath(os.path.join(directory, name), os.path.join(ROOT, "include"))
            rows.append(f"{rel:<{WIDTH}} {first_sentence(os.path.join(directory, name))}")
    return "```\n" + "\n".join(rows) + "\n```"


def current(doc_text):
    a, b = doc_text.find(BEGIN), doc_text.find(END)
    if a < 0 or b < a:
        return None
    return doc_text[a + len(BEGIN):b].strip()


def main(argv):
    want = block()
    if len(argv) == 1:
        print(want)
        return 0
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    have = current(text)
    if argv[1] == "--check":
        if have == want:
            print(f"layout.py: {DOC} names every header of include/steptrace as the tree has it")
            return 0
        have_rows = set((have or "").splitlines())
        for row in want.splitlines():
            if row not in have_rows:
                print(f"missing or changed: {row}")
        for row in sorted(have_rows - set(want.splitlines())):
            print(f"not in the tree:    {row}")
        print("layout.py: docs/architecture.md's layout is out of date: run tests/checks/layout.py --write")
        return 1
    if argv[1] == "--write":
        if have is None:
            print(f"layout.py: {DOC} has no layout markers", file=sys.stderr)
            return 2
        a, b = text.find(BEGIN), text.find(END)
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(text[:a + len(BEGIN)] + "\n" + want + "\n" + text[b:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
