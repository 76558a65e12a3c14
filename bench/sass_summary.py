#!/usr/bin/env python3
"""Summarises cuobjdump -sass output. Per kernel whose name matches PATTERN: the instruction count,
the most frequent opcodes and, for a wgmma kernel, its main loop: of the loops holding wgmmas
(QGMMA / HGMMA), the one with the fewest instructions per wgmma (the unrolled K loop where there
is one), with its length, its wgmmas, its local-memory accesses (LDL / STL: spills) and its FFMAs'
register-bank conflicts: FFMAs whose three source registers all come from one of the two banks
(register number mod 2), an operand that the previous instruction kept with `.reuse` in the same
slot not counted. On the H200 that count tracked the FP8 kernel's speed where its instruction
count did not (docs/design.md). Writes the matching kernels' SASS to OUT_FILE.

With --loop-of OTHER_SASS: per kernel found in both files, whether that loop is the same
instruction for instruction once register numbers and branch targets are set aside (a change
that leaves the loop identical cannot have moved its schedule).

Usage: sass_summary.py SASS_FILE PATTERN OUT_FILE [--loop-of OTHER_SASS]"""
import argparse
import collections
import re
import sys

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")
MMA = re.compile(r"\b[QH]GMMA\b")
PREDICATE = re.compile(r"^@!?U?P[T0-9]\s+")


def functions(text):
    """(name, its SASS text) for every function in cuobjdump -sass output."""
    for part in text.split("Function : ")[1:]:
        yield part.split("\n", 1)[0].strip(), part


def instructions(part):
    """[(address, instruction text)] of one function's SASS."""
    return [(int(m.group(1), 16), m.group(2)) for m in INSTR.finditer(part)]


def mma_loop(instrs):
    """The backward-branch loop holding wgmmas with the fewest instructions per wgmma, or None."""
    index = {addr: i for i, (addr, _) in enumerate(instrs)}
    best, best_ratio = None, None
    for i, (addr, text) in enumerate(instrs):
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= addr or int(m.group(1), 16) not in index:
            continue
        body = instrs[index[int(m.group(1), 16)]:i + 1]
        mmas = sum(1 for _, t in body if MMA.search(t))
        if mmas and (best is None or len(body) / mmas < best_ratio):
            best, best_ratio = body, len(body) / mmas
    return best


FFMA = re.compile(r"\bFFMA\S* R\d+, (-?\|?R\d+)(\.reuse)?\|?, (-?\|?R\d+)(\.reuse)?\|?, (-?\|?R\d+)(\.reuse)?")


def bank_conflicts(body):
    """(conflicts, FFMAs) over the loop: FFMAs whose three source registers are all read from the
    register file (none from the previous instruction's `.reuse` in the same slot) and all lie in
    one of the two banks (register number mod 2): each costs an extra cycle."""
    conflicts = ffmas = 0
    cached = [None, None, None]  # the register each operand slot kept for the next instruction
    for _, text in body:
        m = FFMA.search(text)
        if not m:
            cached = [None, None, None]
            continue
        regs = [re.sub(r"[-|]", "", m.group(g)) for g in (1, 3, 5)]
        reuse = [bool(m.group(g)) for g in (2, 4, 6)]
        read = {r for slot, r in enumerate(regs) if cached[slot] != r}
        conflicts += len(read) == 3 and len({int(r[1:]) % 2 for r in read}) == 1
        ffmas += 1
        cached = [r if keep else None for r, keep in zip(regs, reuse)]
    return conflicts, ffmas


def shape(body):
    """The loop with register numbers and addresses set aside."""
    return [re.sub(r"0x[0-9a-f]+", "X", re.sub(r"\bU?R\d+\b", "R", re.sub(r"\bU?P\d\b", "P", t)))
            for _, t in body]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass_file")
    ap.add_argument("pattern")
    ap.add_argument("out_file")
    ap.add_argument("--loop-of", metavar="OTHER_SASS", help="another build's cuobjdump -sass output")
    args = ap.parse_args(argv)
    other = {}
    if args.loop_of:
        other = {name: instructions(part) for name, part in functions(open(args.loop_of).read())}
    matcher = re.compile(args.pattern)
    kept = []
    for name, part in functions(open(args.sass_file).read()):
        if not matcher.search(name):
            continue
        kept.append("Function : " + part)
        instrs = instructions(part)
        hist = collections.Counter(PREDICATE.sub("", t).split()[0].split(".")[0] for _, t in instrs)
        print(f"{name[:120]}: {len(instrs)} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in hist.most_common(28)))
        loop = mma_loop(instrs)
        if loop is None:
            continue
        mmas = sum(1 for _, t in loop if MMA.search(t))
        local = sum(1 for _, t in loop if re.search(r"\b(LDL|STL)\b", t))
        conflicts, ffmas = bank_conflicts(loop)
        print(f"  wgmma loop: {len(loop)} instructions, {mmas} wgmmas, {len(loop) / mmas:.2f} per wgmma, "
              f"LDL/STL {local}, FFMA register-bank conflicts {conflicts} ({ffmas} FFMAs)")
        if args.loop_of and name in other:
            theirs = mma_loop(other[name])
            same = theirs is not None and shape(theirs) == shape(loop)
            print(f"  against --loop-of: {'the same loop' if same else 'a different loop'}"
                  f" ({len(theirs) if theirs else 0} instructions there)")
    open(args.out_file, "w").write("".join(kept))


if __name__ == "__main__":
    main(sys.argv[1:])
