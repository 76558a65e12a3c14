#!/usr/bin/env python3
"""Summarises cuobjdump -sass output: per kernel whose name matches the pattern, the instruction
count and the most frequent opcodes; writes the matching kernels' SASS to OUT_FILE.
Usage: sass_summary.py SASS_FILE PATTERN OUT_FILE"""
import collections
import re
import sys

text = open(sys.argv[1]).read()
pattern = re.compile(sys.argv[2])
kept = []
for part in text.split("Function : ")[1:]:
    name = part.split("\n", 1)[0].strip()
    if not pattern.search(name):
        continue
    kept.append("Function : " + part)
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", part)
    hist = collections.Counter(op.split(".")[0] for op in ops)
    print(f"{name[:120]}: {len(ops)} instructions")
    print("  " + ", ".join(f"{op} {n}" for op, n in hist.most_common(28)))
open(sys.argv[3], "w").write("".join(kept))
