#!/usr/bin/env python3
"""Point references at documents outside the repository to their copies under docs/.

Early code comments and csr-maps `source` fields cite working notes that never lived in this
repository (hardware and libnrt fact sheets, three libnrt study pages, a design note, QEMU
notes). Their content now lives in docs/ with the same section numbers:

    NEURON_HW_FACTS §X.Y        -> docs/facts/hardware.md §X.Y
    NRT_FACTS §X.Y              -> docs/facts/libnrt.md §X.Y
    seed 000 §X.Y               -> docs/facts/libnrt-runtime-model.md §A.X.Y
    seed 001 §X.Y               -> docs/facts/libnrt-runtime-model.md §B.X.Y
    seed 004 §X.Y               -> docs/facts/libnrt-runtime-model.md §C.X.Y
    ../shared/DESIGN.md         -> docs/architecture.md
    QEMU_VFIO_NOTES.md          -> docs/qemu.md
    FABRIC_NOTES.md             -> docs/fabric.md (only once that file exists)

A few references carry no section number ("the seeds", "the fact sheet"); PHRASES maps those
that exist, per file. Anything the rules cannot map is listed and the exit status is 2.

Usage:
    rewrite-refs.py [ROOT]            rewrite in place (ROOT defaults to the repository root)
    rewrite-refs.py --dry-run [ROOT]  show what would change, write nothing
    rewrite-refs.py --check [ROOT]    exit 1 if any outside reference remains (for CI/tests)

Python 3 standard library only.
"""

import argparse
import os
import re
import sys
from collections import Counter

HW_DOC = "docs/facts/hardware.md"
NRT_DOC = "docs/facts/libnrt.md"
RT_DOC = "docs/facts/libnrt-runtime-model.md"
ARCH_DOC = "docs/architecture.md"
QEMU_DOC = "docs/qemu.md"
FABRIC_DOC = "docs/fabric.md"

SEED_PART = {"000": "A", "001": "B", "004": "C"}

SKIP_DIRS = {".git", "target", "node_modules", "__pycache__"}
TEXT_EXTS = {
    ".rs", ".toml", ".md", ".sh", ".py", ".c", ".h", ".txt", ".json", ".yml", ".yaml", ".cfg",
    ".ld", ".in", ".mk",
}
TEXT_NAMES = {"Makefile", "Dockerfile", "init", "README"}

# What counts as a reference to a document outside the repository (the --check guard).
OUTSIDE = re.compile(
    r"NEURON_HW_FACTS|NRT_FACTS|QEMU_VFIO_NOTES|FABRIC_NOTES"
    r"|(?:\.\./)+shared/|/work/shared|/work/briefs|\bDESIGN\.md"
    r"|\bseeds? \d{3}\b|\b[Tt]he seeds?\b|\bseed's\b|\bfact[ -]sheets?\b"
)

# An optional path in front of a document name: ../shared/reference/, /work/shared/seeds/, ...
PATH = r"(?:(?:\.\./)+|/work/)?(?:shared/)?(?:reference/)?"
SEC = r"§\s?\d+(?:\.\d+)*"
# A section list: §4.1, §4.6, §8 | §4.3–§5.4 | §6-7 | §1 and §3 (a later item needs its own §
# unless it follows a range dash).
SEC_LIST = SEC + r"(?:\s*[-–—]\s*§?\s?\d+(?:\.\d+)*|\s*(?:,|and|/)\s*" + SEC + r")*"

# Unnumbered references, per file (path suffix, regex, replacement). Applied before the rules.
PHRASES = [
    ("csr-maps/src/formats/slot.rs",
     r"whose operand layouts the fact sheet does not give \(§2\.4, §11\)",
     f"whose operand layouts the public sources do not give ({NRT_DOC} §2.4, §11)"),
    ("csr-maps/src/formats/slot.rs",
     r"whose layout the fact sheet does not give \(kept verbatim\)",
     f"whose layout the public sources do not give ({NRT_DOC} §2.4; kept verbatim)"),
    ("runtime/src/state.rs",
     r"the disassembly quoted in seed 000 has no such branch",
     f"libnrt's `nrt_execute` guard ({RT_DOC} §A.1.1) has no such branch"),
    ("runtime/src/state.rs",
     r"seed 000 pins",
     f"{RT_DOC} §A.1.1 pins"),
    ("runtime/src/error_decode.rs",
     r"The seed gives",
     f"{RT_DOC} §A.4.5 gives"),
    ("runtime/src/error_decode.rs",
     r"Decoder parameters the seed leaves open\.",
     f"Decoder parameters libnrt's description leaves open ({RT_DOC} §A.4.5)."),
    ("runtime/src/error_decode.rs",
     r"\(value not given by the seed;",
     f"(value not given in {RT_DOC} §A.4.5;"),
    ("runtime/src/completion.rs",
     r"\(the seed's \"failed but error not set\"\)",
     f"({RT_DOC} §B.1: a failure with no status set)"),
    ("runtime/src/completion.rs",
     r"seed 001(\s*(?://[!/]?)?\s*)COMPLETE-1",
     RT_DOC + r" §B.4\1(COMPLETE-1)"),
    ("runtime/src/timestamp.rs",
     r"not detailed by the seed\b",
     f"not detailed in {RT_DOC} §B.3"),
    ("runtime/src/env.rs",
     r"The seeds(\s*(?://[!/]?)?\s*)only say\b",
     RT_DOC + r" (§A.5.4, §B.5)\1only says"),
    ("runtime/tests/statuses.rs",
     r"Every status the seeds name",
     f"Every status {RT_DOC} §A.4.1 names"),
    ("runtime/src/rt.rs",
     r"seed 001 timestamp rescale",
     f"{RT_DOC} §B.3 timestamp rescale"),
]


def seed_repl(m):
    part = SEED_PART[m.group("num")]
    secs = m.group("secs")
    if not secs:
        return f"{RT_DOC} §{part}"
    # Prefix every number in the list with the part letter; give every item its own §.
    out = re.sub(r"§?\s?(\d+(?:\.\d+)*)", lambda n: f"§{part}.{n.group(1)}", secs)
    return f"{RT_DOC} {out}"


def build_rules(root):
    fabric = os.path.exists(os.path.join(root, FABRIC_DOC))
    rules = [
        ("design", re.compile(PATH + r"DESIGN\.md"), lambda m: ARCH_DOC),
        ("qemu", re.compile(PATH + r"QEMU_VFIO_NOTES(?:\.md)?"), lambda m: QEMU_DOC),
        ("hardware", re.compile(PATH + r"NEURON_HW_FACTS(?:\.md)?"), lambda m: HW_DOC),
        ("libnrt", re.compile(PATH + r"NRT_FACTS(?:\.md)?"), lambda m: NRT_DOC),
        ("runtime-model",
         re.compile(r"(?:(?:(?:\.\./)+|/work/)?(?:shared/)?seeds/|\bseed )(?P<num>000|001|004)"
                    r"(?:_[0-9a-f]{16}\.txt)?(?: (?P<secs>" + SEC_LIST + r"))?"),
         seed_repl),
    ]
    if fabric:
        rules.append(("fabric", re.compile(PATH + r"FABRIC_NOTES(?:\.md)?"), lambda m: FABRIC_DOC))
    return rules


def text_files(root, exclude):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.abspath(path) in exclude:
                continue
            ext = os.path.splitext(name)[1]
            if ext in TEXT_EXTS or name in TEXT_NAMES:
                try:
                    with open(path, encoding="utf-8") as f:
                        yield path, f.read()
                except (UnicodeDecodeError, OSError):
                    continue


def outside_refs(root, text, path):
    rel = os.path.relpath(path, root)
    for i, line in enumerate(text.splitlines(), 1):
        if OUTSIDE.search(line):
            yield f"{rel}:{i}: {line.strip()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", default=os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..")))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only report outside references; exit 1 if any")
    mode.add_argument("--dry-run", action="store_true", help="show the rewrites, write nothing")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    exclude = {os.path.abspath(__file__)}

    if args.check:
        found = [hit for path, text in text_files(root, exclude) for hit in outside_refs(root, text, path)]
        for hit in found:
            print(hit)
        print(f"{len(found)} reference(s) to documents outside the repository", file=sys.stderr)
        return 1 if found else 0

    rules = build_rules(root)
    counts = Counter()
    changed = []
    for path, text in text_files(root, exclude):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        new = text
        for suffix, pattern, repl in PHRASES:
            if rel.endswith(suffix):
                new, n = re.subn(pattern, repl, new)
                counts["phrase"] += n
        for kind, pattern, repl in rules:
            new, n = pattern.subn(repl, new)
            counts[kind] += n
        if new != text:
            changed.append(rel)
            if args.dry_run:
                for old_line, new_line in zip(text.splitlines(), new.splitlines()):
                    if old_line != new_line:
                        print(f"{rel}:\n  - {old_line.strip()}\n  + {new_line.strip()}")
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)

    total = sum(counts.values())
    verb = "would rewrite" if args.dry_run else "rewrote"
    print(f"{verb} {total} reference(s) in {len(changed)} file(s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v), file=sys.stderr)

    # What is left (after the rewrite, or as it would be after it) could not be mapped.
    left = []
    for path, text in text_files(root, exclude):
        if args.dry_run:
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            for suffix, pattern, repl in PHRASES:
                if rel.endswith(suffix):
                    text = re.sub(pattern, repl, text)
            for _, pattern, repl in rules:
                text = pattern.sub(repl, text)
        left.extend(outside_refs(root, text, path))
    if not os.path.exists(os.path.join(root, QEMU_DOC)) and counts["qemu"]:
        print(f"note: {QEMU_DOC} does not exist yet", file=sys.stderr)
    if left:
        print(f"{len(left)} reference(s) could not be mapped:", file=sys.stderr)
        for hit in left:
            print(hit)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
