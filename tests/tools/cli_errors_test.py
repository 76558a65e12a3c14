#!/usr/bin/env python3
"""Every error path of the `blockscale` CLI: the exit code (docs/cli.md: 1 failed, 2 bad usage),
the message (one line, "blockscale <command>: ...", no internal identifier), that no output file
(nor a temporary one) is left behind, and that an existing output file survives a failed run
untouched; and `blockscale --version`.

Usage: cli_errors_test.py --cli build/blockscale
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import save_file

FAILURES = []
COMMANDS = ("quantize", "dequantize", "study", "gemm", "train", "version")
# Names of functions, classes and variables that a message must not show a user.
INTERNAL = re.compile(r"::|\b(num_tokens|vocab_size|load_checkpoint|save_checkpoint|RunLog|resume_step|"
                      r"matrix_view|synthetic_suite|open_study_files|a_recipe|b_recipe)\b")


def run(cli, args, cwd):
    p = subprocess.run([cli] + args, cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def message_problems(args, err):
    """The error contract: stderr is one line, "blockscale <command>: <message>" ("blockscale: "
    where there is no command), naming no internal identifier."""
    command = args[0] if args and args[0] in COMMANDS else ""
    prefix = f"blockscale {command}: " if command else "blockscale: "
    lines = err.splitlines()
    problems = []
    if len(lines) != 1:
        problems.append(f"stderr has {len(lines)} lines, want 1")
    elif not lines[0].startswith(prefix):
        problems.append(f"stderr does not start with {prefix!r}")
    if INTERNAL.search(err):
        problems.append(f"stderr names an internal identifier ({INTERNAL.search(err).group(0)!r})")
    return problems


def expect_error(cli, workdir, label, args, code, *needles):
    """Runs `args` in `workdir` and checks exit code, message and that no file appeared."""
    before = set(os.listdir(workdir))
    rc, out, err = run(cli, args, workdir)
    after = set(os.listdir(workdir))
    problems = message_problems(args, err)
    if rc != code:
        problems.append(f"exit code {rc}, want {code}")
    for n in needles:
        if n not in err:
            problems.append(f"stderr lacks {n!r}")
    if after - before:
        problems.append(f"left files behind: {sorted(after - before)}")
    if problems:
        FAILURES.append(f"{label}: {'; '.join(problems)}\n    args: {args}\n    stderr: {err.strip()}")
    else:
        print(f"ok   {label}: {err.strip().splitlines()[-1] if err.strip() else ''}")


def make_inputs(d):
    rng = np.random.default_rng(7)
    np.save(os.path.join(d, "x.npy"), rng.standard_normal((4, 64)).astype(np.float32))
    np.save(os.path.join(d, "odd.npy"), rng.standard_normal((4, 40)).astype(np.float32))
    save_file({"w": rng.standard_normal((8, 64)).astype(np.float32),
               "b": rng.standard_normal((64,)).astype(np.float32)}, os.path.join(d, "two.safetensors"))
    save_file({"ids": np.arange(12, dtype=np.int32).reshape(3, 4)}, os.path.join(d, "ints.safetensors"))
    with open(os.path.join(d, "corrupt.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00\xff\xff{'descr'")
    with open(os.path.join(d, "corrupt.safetensors"), "wb") as f:
        f.write((1 << 40).to_bytes(8, "little") + b"{}")
    with open(os.path.join(d, "x.txt"), "w") as f:
        f.write("1 2 3\n")
    with open(os.path.join(d, "no_tensors.safetensors"), "wb") as f:  # a header of {} and nothing else
        f.write((8).to_bytes(8, "little") + b"{}      ")


def patch_tensor(src, dst, key, index, value):
    """Copies safetensors file `src` to `dst` with element `index` of tensor `key` set to the bytes
    `value` (a quantized file written by hand: numpy has no fp8 dtype to load it with)."""
    import json
    raw = bytearray(open(src, "rb").read())
    n = int.from_bytes(raw[:8], "little")
    entry = json.loads(raw[8:8 + n])[key]
    at = 8 + n + entry["data_offsets"][0] + index * len(value)
    raw[at:at + len(value)] = value
    open(dst, "wb").write(bytes(raw))


def check_version(cli):
    """`blockscale --version` and `blockscale version` print the version CMake's project() gives."""
    cmake = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")).read()
    want = "blockscale " + re.search(r"project\(blockscale VERSION ([0-9.]+)", cmake).group(1)
    for args in (["--version"], ["version"]):
        rc, out, err = run(cli, args, ".")
        if rc != 0 or out.strip() != want or err:
            FAILURES.append(f"blockscale {' '.join(args)}: exit {rc}, stdout {out.strip()!r}, want 0 and {want!r}")
        else:
            print(f"ok   blockscale {' '.join(args)}: {out.strip()}")


def check_doc(cli, doc):
    """Every subcommand and every option its --help lists appears in docs/cli.md's options section."""
    import re
    text = open(doc).read()
    section = text[text.index("## Commands and options"):]
    section = section[:section.index("\n## ", 3)]
    for cmd in ("quantize", "dequantize", "study", "gemm", "train"):
        _, out, _ = run(cli, [cmd, "--help"], ".")
        options = set(re.findall(r"^\s+(?:-\w,)?(--[\w-]+)", out, re.M)) - {"--help"}
        missing = sorted(o for o in options if o not in section)
        if f"blockscale {cmd}" not in section or missing:
            FAILURES.append(f"docs/cli.md's options section lacks 'blockscale {cmd}' or its options {missing}")
        else:
            print(f"ok   docs/cli.md names {cmd} and its {len(options)} options")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--doc", help="docs/cli.md: its options section must name every option --help lists")
    args = ap.parse_args()
    cli = os.path.abspath(args.cli)
    if args.doc:
        check_doc(cli, args.doc)
    check_version(cli)
    with tempfile.TemporaryDirectory() as d:
        make_inputs(d)
        # A quantized file and a schema-breaking copy of it, for the dequantize errors.
        rc, _, err = run(cli, ["quantize", "--recipe", "mxfp8", "--in", "two.safetensors",
                               "--out", "q.safetensors", "--quiet"], d)
        assert rc == 0, err
        # Drop w.scale: rewrite the file by hand (plain numpy has no fp8 dtype to load it with).
        import json
        with open(os.path.join(d, "q.safetensors"), "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        header, buf = json.loads(raw[8:8 + n]), raw[8 + n:]
        del header["w.scale"]
        out, pos = b"", 0
        for k, v in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                           key=lambda kv: kv[1]["data_offsets"][0]):
            b, e = v["data_offsets"]
            out += buf[b:e]
            v["data_offsets"] = [pos, pos + e - b]
            pos += e - b
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(os.path.join(d, "broken.safetensors"), "wb") as f:
            f.write(len(hb).to_bytes(8, "little") + hb + out)
        # Scales quantize never writes: a negative fp32 scale (fp8_block128), a UE4M3 code with
        # the sign bit set (nvfp4).
        import struct
        for recipe, name in (("fp8_block128", "fp8.safetensors"), ("nvfp4", "nv.safetensors")):
            rc, _, err = run(cli, ["quantize", "--recipe", recipe, "--in", "x.npy", "--out", name, "--quiet"], d)
            assert rc == 0, err
        patch_tensor(os.path.join(d, "fp8.safetensors"), os.path.join(d, "negscale.safetensors"), "x.scale", 2,
                     struct.pack("<f", -0.5))
        patch_tensor(os.path.join(d, "nv.safetensors"), os.path.join(d, "signscale.safetensors"), "x.scale", 5,
                     bytes([0x85]))

        E = lambda label, args, code, *n: expect_error(cli, d, label, args, code, *n)
        q = ["quantize", "--in", "x.npy", "--out", "y.safetensors", "--quiet"]
        E("quantize a file with no tensor", ["quantize", "--recipe", "mxfp8", "--in", "no_tensors.safetensors",
                                             "--out", "y.safetensors"], 1, "no tensor")
        # Usage errors (exit 2).
        E("no command", [], 2, "blockscale")
        E("unknown command", ["frobnicate"], 2, "frobnicate")
        E("quantize without --recipe", q, 2, "--recipe")
        E("quantize unknown recipe", q + ["--recipe", "mxfp9"], 2, "mxfp9", "mxfp8")
        E("quantize without --in", ["quantize", "--recipe", "mxfp8", "--out", "y.safetensors"], 2, "--in")
        E("quantize without --out", ["quantize", "--recipe", "mxfp8", "--in", "x.npy"], 2, "--out")
        E("quantize bad --rounding", q + ["--recipe", "mxfp8", "--rounding", "up"], 2, "--rounding", "up")
        E("quantize bad --direction", q + ["--recipe", "mxfp8", "--direction", "diag"], 2, "--direction")
        E("quantize bad --sr-seed", q + ["--recipe", "nvfp4", "--sr-seed", "abc"], 2, "--sr-seed")
        # Seeds are unsigned 64-bit: a sign or a value past 2^64 - 1 is refused, not wrapped.
        E("quantize negative --sr-seed", q + ["--recipe", "nvfp4", "--sr-seed", "-1"], 2, "--sr-seed", "not a seed")
        E("quantize --sr-seed 2^64", q + ["--recipe", "nvfp4", "--sr-seed", "18446744073709551616"], 2, "--sr-seed",
          "not a seed")
        E("quantize unknown flag", q + ["--recipe", "mxfp8", "--fast"], 2, "--fast")
        # Option combinations the recipe does not have (exit 2, before any file is read).
        E("floor on nvfp4", q + ["--recipe", "nvfp4", "--rounding", "floor"], 2, "--rounding floor", "MX recipes only")
        E("sr on mxfp8", q + ["--recipe", "mxfp8", "--sr-seed", "3"], 2, "--sr-seed", "nvfp4 only")
        E("rht on mxfp8", q + ["--recipe", "mxfp8", "--rht", "--direction", "both"], 2, "--rht", "nvfp4 only")
        E("rht rowwise", q + ["--recipe", "nvfp4", "--rht"], 2, "--rht", "columnwise")
        E("rht with 2d", q + ["--recipe", "nvfp4", "--rht", "--2d", "--direction", "both"], 2, "--rht", "--2d")
        E("2d on mxfp8", q + ["--recipe", "mxfp8", "--2d"], 2, "--2d", "nvfp4 only")
        E("pow2 on mxfp8", q + ["--recipe", "mxfp8", "--pow2"], 2, "--pow2", "fp8_block")
        E("out equals in", ["quantize", "--recipe", "mxfp8", "--in", "two.safetensors", "--out",
                            "two.safetensors"], 2, "--out", "differ")
        E("out not safetensors", ["quantize", "--recipe", "mxfp8", "--in", "x.npy", "--out", "y.npy"], 2,
          "--out", "'y.npy'", ".safetensors")
        E("input extension", ["quantize", "--recipe", "mxfp8", "--in", "x.txt", "--out", "y.safetensors"], 2,
          "--in", "'x.txt'", ".npy or .safetensors")
        # Input problems (exit 1).
        E("missing input", ["quantize", "--recipe", "mxfp8", "--in", "nope.npy", "--out", "y.safetensors"], 1,
          "--in 'nope.npy'")
        E("corrupt npy", ["quantize", "--recipe", "mxfp8", "--in", "corrupt.npy", "--out", "y.safetensors"], 1,
          "--in 'corrupt.npy'")
        E("corrupt safetensors", ["quantize", "--recipe", "mxfp8", "--in", "corrupt.safetensors", "--out",
                                  "y.safetensors"], 1, "--in 'corrupt.safetensors'", "header")
        E("no float tensor", ["quantize", "--recipe", "mxfp8", "--in", "ints.safetensors", "--out",
                              "y.safetensors"], 1, "'ids'", "no floating-point tensor", "I32")
        E("rht width not a multiple of 16", ["quantize", "--recipe", "nvfp4", "--rht", "--direction", "columnwise",
                                             "--in", "odd.npy", "--out", "y.safetensors", "--quiet"], 1, "x:", "--rht",
          "multiple of 16")
        E("gpu for a recipe without a kernel", q + ["--recipe", "mxfp6_e2m3", "--device", "gpu"], 2, "--device gpu")
        E("bad --device", q + ["--recipe", "mxfp8", "--device", "tpu"], 2, "--device")
        E("output directory missing", ["quantize", "--recipe", "mxfp8", "--in", "x.npy", "--out",
                                       "no/such/dir/y.safetensors", "--quiet"], 1, "no/such/dir")
        # An existing output survives a failed run byte for byte.
        with open(os.path.join(d, "keep.safetensors"), "wb") as f:
            f.write(b"previous contents")
        E("failed run keeps the old output", ["quantize", "--recipe", "nvfp4", "--rht", "--direction", "both",
                                              "--in", "odd.npy", "--out", "keep.safetensors", "--quiet"], 1,
          "multiple of 16")
        with open(os.path.join(d, "keep.safetensors"), "rb") as f:
            if f.read() != b"previous contents":
                FAILURES.append("failed run keeps the old output: keep.safetensors was modified")
        # A read-only output and a link in the output's place are the user's: refused, left as they are.
        with open(os.path.join(d, "ro.safetensors"), "wb") as f:
            f.write(b"read-only contents")
        os.chmod(os.path.join(d, "ro.safetensors"), 0o444)
        E("read-only output", ["quantize", "--recipe", "mxfp8", "--in", "x.npy", "--out", "ro.safetensors", "--quiet"],
          1, "'ro.safetensors'", "read-only")
        with open(os.path.join(d, "target.bin"), "wb") as f:
            f.write(b"link target")
        os.symlink("target.bin", os.path.join(d, "link.safetensors"))
        E("output is a link", ["quantize", "--recipe", "mxfp8", "--in", "x.npy", "--out", "link.safetensors",
                               "--quiet"], 1, "'link.safetensors'", "symbolic link")
        with open(os.path.join(d, "ro.safetensors"), "rb") as f, open(os.path.join(d, "target.bin"), "rb") as g:
            if f.read() != b"read-only contents" or g.read() != b"link target" or \
                    not os.path.islink(os.path.join(d, "link.safetensors")):
                FAILURES.append("a read-only or linked output was changed")

        dq = lambda *a: ["dequantize", "--quiet"] + list(a)
        E("dequantize without --in", dq("--out", "z.npy"), 2, "--in")
        E("dequantize npy input", dq("--in", "x.npy", "--out", "z.safetensors"), 2, "--in", "'x.npy'", ".safetensors")
        E("dequantize plain file", dq("--in", "two.safetensors", "--out", "z.safetensors"), 1,
          "no quantized tensor")
        E("dequantize unknown tensor", dq("--in", "q.safetensors", "--out", "z.npy", "--tensor", "v"), 1,
          "--tensor 'v'")
        E("dequantize several to npy", dq("--in", "q.safetensors", "--out", "z.npy"), 1, ".npy", "--tensor")
        E("dequantize bad out", dq("--in", "q.safetensors", "--out", "z.bin"), 2, "--out", "'z.bin'")
        E("dequantize out equals in", dq("--in", "q.safetensors", "--out", "q.safetensors"), 2, "differ")
        E("dequantize broken schema", dq("--in", "broken.safetensors", "--out", "z.safetensors"), 1,
          "--in 'broken.safetensors'", "w.scale")
        # Scales quantize never writes: the key, the block, the value and the rule (exit 1).
        E("dequantize a negative fp8 scale", dq("--in", "negscale.safetensors", "--out", "z.npy"), 1,
          "--in 'negscale.safetensors'", "'x.scale': scale (2, 0) is -0.5", "finite values >= 0")
        E("dequantize a UE4M3 scale with a sign bit", dq("--in", "signscale.safetensors", "--out", "z.npy"), 1,
          "'x.scale': scale (1, 1) is code 0x85", "0x00-0x7F")

        st = lambda *a: ["study", "--quiet"] + list(a)
        with open(os.path.join(d, "afile"), "w") as f:
            f.write("not a directory")
        E("study missing input", st("--in", "nope.npy"), 1, "--in 'nope.npy'")
        E("study unknown recipe", st("--recipes", "mxfp9"), 2, "--recipes", "mxfp9")
        E("study unknown gemm tensor", st("--in", "two.safetensors", "--gemm", "w:zz"), 1, "--gemm 'w:zz'", "zz")
        E("study gemm tensor of no input", st("--in", "two.safetensors", "--in", "x.npy", "--gemm", "two/w:odd/x"), 1,
          "no tensor")
        E("study gemm K mismatch", st("--in", "x.npy", "--in", "odd.npy", "--gemm", "x/x:odd/x"), 1, "K must match")
        E("study out-dir is a file", st("--in", "x.npy", "--out-dir", "afile"), 1, "--out-dir 'afile'")
        E("study --in with --hidden", st("--in", "x.npy", "--hidden", "64"), 2, "--hidden")
        E("study --in extension", st("--in", "x.txt"), 2, "--in", "'x.txt'", ".npy or .safetensors")
        E("study --gemm without a colon", st("--in", "two.safetensors", "--gemm", "w"), 2, "--gemm 'w'", "A:B")
        E("study --hidden not a multiple of 16", st("--hidden", "40"), 2, "--hidden 40", "multiple of 16")
        E("study --threads out of range", st("--threads", "-1"), 2, "--threads")
        E("study no float tensor", st("--in", "ints.safetensors"), 1, "--in", "no floating-point tensor", "ids")
        # gemm: usage errors (exit 2), then a shape gemm/ refuses (exit 1, before any GPU work;
        # a build without CUDA refuses every gemm, also with exit 1).
        g = ["gemm", "--m", "64", "--n", "64"]
        E("gemm without --k", g, 2, "--k")
        E("gemm bad --out-type", g + ["--k", "128", "--out-type", "fp16"], 2, "--out-type")
        E("gemm unknown --gemm-route", g + ["--k", "128", "--gemm-route", "fast"], 2, "--gemm-route", "fast")
        E("gemm unknown --fp8-route (the earlier spelling)", g + ["--k", "128", "--fp8-route", "fast"], 2,
          "--gemm-route", "fast")
        E("gemm --gemm-route bf16 (a training route)", g + ["--k", "128", "--gemm-route", "bf16"], 2,
          "--gemm-route bf16", "auto, kernel or cublaslt")
        E("gemm --grouped with --gemm-route cublaslt",
          ["gemm", "--grouped", "m", "--n", "256", "--k", "256", "--gemm-route", "cublaslt"], 2,
          "--gemm-route cublaslt", "--grouped")
        E("gemm unknown recipe", g + ["--k", "128", "--recipe", "fp9"], 2, "fp9")
        E("gemm without --m", ["gemm", "--n", "64", "--k", "128"], 2, "--m", "--grouped")
        # A shape gemm/ refuses is bad usage (exit 2); a build without CUDA refuses every gemm
        # (exit 1: this build cannot run it).
        rc, _, err = run(cli, g + ["--k", "100", "--quiet"], d)
        cuda = "no CUDA parts" not in err
        if (rc, cuda) in ((2, True), (1, False)) and ("multiple of 128" in err or not cuda) and \
                not message_problems(g, err):
            print(f"ok   gemm k not a multiple of 128: {err.strip()}")
        else:
            FAILURES.append(f"gemm k not a multiple of 128: exit {rc}, stderr {err.strip()!r}")
        # gemm --grouped: its options' rules are checked before any work (exit 2, also in a build
        # without CUDA).
        gg = ["gemm", "--n", "64", "--k", "128", "--grouped"]
        E("gemm bad --grouped", gg + ["x", "--tokens", "100"], 2, "--grouped")
        E("gemm --grouped without --tokens", gg + ["m"], 2, "--tokens")
        E("gemm --grouped with --m", gg + ["m", "--tokens", "100", "--m", "5"], 2, "--m")
        E("gemm --grouped bad --skew", gg + ["k", "--tokens", "100", "--skew", "2"], 2, "--skew")
        E("gemm --grouped --skew nan", gg + ["k", "--tokens", "100", "--skew", "nan"], 2, "--skew", "not a finite")
        E("gemm --grouped --skew with one expert", gg + ["m", "--tokens", "100", "--skew", "0.5", "--experts", "1"], 2,
          "--skew", "--experts")
        tr = ["train", "--device", "cpu", "--steps", "2"]
        # Usage errors (exit 2), every one before the run directory is made.
        E("train unknown recipe", tr + ["--recipe", "fp4"], 2, "--recipe", "fp4")
        E("train unknown --gemm-route", tr + ["--gemm-route", "fast"], 2, "--gemm-route", "fast")
        for old in ("--mx-gemm", "--fp8-route", "--fp8-gemm"):
            E(f"train unknown {old} (an earlier spelling)", tr + [old, "fast"], 2, "--gemm-route", "fast")
        E("train two route options", tr + ["--mx-gemm", "bf16", "--fp8-route", "kernel"], 2, "--gemm-route")
        E("train --gemm-route cublaslt with mxfp8", tr + ["--recipe", "mxfp8", "--gemm-route", "cublaslt"], 2,
          "--gemm-route cublaslt", "mxfp8")
        E("train --gemm-route bf16 with fp8_block in --compare",
          tr + ["--compare", "bf16,fp8_block", "--gemm-route", "bf16"], 2, "--gemm-route bf16", "fp8_block")
        E("train d-model not a multiple of the block", tr + ["--recipe", "fp8_block", "--d-model", "96"], 2,
          "--d-model", "128")
        E("train --compare with a recipe the width does not fit", tr + ["--compare", "bf16,fp8_block", "--d-model",
                                                                        "96"], 2, "--d-model", "fp8_block")
        E("train --steps not a number", tr[:-2] + ["--steps", "abc"], 2, "--steps")
        E("train --eval-batches 0", tr + ["--eval-batches", "0"], 2, "--eval-batches must be >= 1")
        E("train --keep-checkpoints 0", tr + ["--keep-checkpoints", "0"], 2, "--keep-checkpoints must be >= 1")
        E("train --beta2 1", tr + ["--beta2", "1"], 2, "--beta2 must be in [0, 1)")
        E("train --clip inf", tr + ["--clip", "inf"], 2, "--clip", "finite")
        E("train --weight-decay nan", tr + ["--weight-decay", "nan"], 2, "--weight-decay", "finite")
        E("train --lr nan", tr + ["--lr", "nan"], 2, "--lr", "finite")
        E("train --aux-loss-coef inf", tr + ["--aux-loss-coef", "inf"], 2, "--aux-loss-coef", "finite")
        E("train --synthetic-tokens 1", tr + ["--synthetic-tokens", "1"], 2, "--synthetic-tokens must be >= 2")
        E("train --vocab below the synthetic corpus's", tr + ["--vocab", "8"], 2, "--vocab", "--data synthetic")
        E("train unknown --data", tr + ["--data", "csv", "--data-path", "x.txt"], 2, "--data", "csv")
        E("train unknown --token-dtype", tr + ["--data", "tokens", "--data-path", "x.txt", "--token-dtype", "int8"],
          2, "--token-dtype", "int8")
        E("train missing token file", tr + ["--data", "tokens", "--data-path", "nope.bin"], 1, "nope.bin")
        E("train file source without --data-path", tr + ["--data", "tokens"], 2, "--data-path", "--data tokens")
        E("train empty --compare", tr + ["--compare", ""], 2, "--compare", "one or more recipes")
        E("train negative --seed", tr + ["--seed", "-1"], 2, "--seed", "not a seed")
        E("train resume from nothing", tr + ["--resume", "no_such_run"], 1, "--resume", "no_such_run")
        E("train expert parallel on the CPU", tr + ["--expert-parallel"], 2, "--expert-parallel", "--device cpu")
        E("train unknown --grad-reduce", tr + ["--grad-reduce", "half"], 2, "--grad-reduce", "half")
        E("train unknown --collectives", tr + ["--collectives", "nvlink"], 2, "--collectives", "nvlink",
          "copy-engines")
        E("train bf16 gradient sums on the CPU", tr + ["--grad-reduce", "bf16"], 2, "--grad-reduce bf16",
          "--device cpu")
        # A resume with an option changed names the option, both values, on one line (exit 1).
        tiny = ["train", "--device", "cpu", "--d-model", "32", "--d-ff", "32", "--layers", "1", "--heads", "2",
                "--experts", "2", "--top-k", "1", "--seq-len", "16", "--vocab", "32", "--batch", "2",
                "--synthetic-tokens", "4000", "--eval-batches", "1", "--schedule-steps", "4", "--out", "run"]
        rc, _, err = run(cli, tiny + ["--steps", "2"], d)
        assert rc == 0, err
        E("train resume with other options", tiny + ["--steps", "4", "--resume", "run", "--seed", "2", "--lr", "0.01"],
          1, "--resume", "saved with other options", "--seed 1 (this run: 2)", "--lr 0.003 (this run: 0.01)")

    if FAILURES:
        print("\n".join("FAIL " + f for f in FAILURES))
        sys.exit(1)
    print("all CLI error paths behave")


if __name__ == "__main__":
    main()


# ---- train: run directories and memory -------------------------------------------------------
# Runs after main() above has passed (it exits on a failure): one run per directory at a time, a
# new run refused in a directory holding a run unless --overwrite, --resume continuing it, no
# output through a symbolic link, a run too large for the machine refused before it starts, and an
# allocation failure an error (exit 1), never an abort.
def run_dir_cases(cli):
    import fcntl
    import resource

    def snapshot(path):
        files = {}
        for root, dirs, names in os.walk(path):
            for n in names:
                p = os.path.join(root, n)
                files[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else open(p, "rb").read()
            for n in dirs:
                files[os.path.relpath(os.path.join(root, n), path) + "/"] = b""
        return files

    def check(label, rc, err, code, *needles):
        problems = [f"exit code {rc}, want {code}"] if rc != code else []
        problems += [f"stderr lacks {n!r}" for n in needles if n not in err]
        if code != 0 and len(err.strip().splitlines()) != 1:
            problems.append("the error is not one line")
        if problems:
            FAILURES.append(f"{label}: {'; '.join(problems)}\n    stderr: {err.strip()}")
        else:
            print(f"ok   {label}: {err.strip().splitlines()[-1] if code != 0 else 'exit 0'}")

    tiny = ["train", "--device", "cpu", "--d-model", "32", "--d-ff", "32", "--layers", "1", "--heads", "2",
            "--experts", "4", "--top-k", "2", "--seq-len", "32", "--vocab", "64", "--batch", "2",
            "--synthetic-tokens", "20000", "--eval-batches", "1", "--schedule-steps", "8"]
    with tempfile.TemporaryDirectory() as d:
        E = lambda label, args, code, *n: expect_error(cli, d, label, args, code, *n)
        E("train --overwrite with --resume", tiny + ["--overwrite", "--resume", "r"], 2, "--overwrite", "--resume")
        huge = ["train", "--device", "cpu", "--d-model", "4096", "--d-ff", "262144", "--layers", "64",
                "--experts", "64"]
        E("train a model too large for the machine", huge, 1, "the run needs about", "of host memory",
          "this machine has", "available")

        out = os.path.join(d, "run")
        rc, _, err = run(cli, tiny + ["--out", out, "--steps", "2"], d)
        check("train a first run", rc, err, 0)
        before = snapshot(out)
        rc, _, err = run(cli, tiny + ["--out", out, "--steps", "2", "--seed", "2"], d)
        check("train a new run into a run directory", rc, err, 1, "already holds a run", "--resume", "--overwrite")
        if snapshot(out) != before:
            FAILURES.append("train a new run into a run directory: the old run's files changed")

        # Another run holds the directory: this process takes its lock, as a running train would.
        with open(os.path.join(out, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = snapshot(out)
            for label, extra in (("resumed", ["--resume", out, "--steps", "4"]), ("overwriting", ["--overwrite", "--steps", "2"])):
                rc, _, err = run(cli, tiny + ["--out", out] + extra, d)
                check(f"train {label} on a directory in use", rc, err, 1, "another run is using this directory", out)
                if snapshot(out) != held:
                    FAILURES.append(f"train {label} on a directory in use: the running run's files changed")
        os.remove(os.path.join(out, ".lock"))

        rc, _, err = run(cli, tiny + ["--out", out, "--resume", out, "--steps", "4"], d)
        check("train --resume continues the run", rc, err, 0)
        steps = len(open(os.path.join(out, "train.csv")).read().splitlines()) - 1
        if steps != 4:
            FAILURES.append(f"train --resume continues the run: train.csv has {steps} steps, want 4")
        rc, _, err = run(cli, tiny + ["--out", out, "--overwrite", "--steps", "3"], d)
        check("train --overwrite replaces the run", rc, err, 0)
        steps = len(open(os.path.join(out, "train.csv")).read().splitlines()) - 1
        if steps != 3 or open(os.path.join(out, "latest")).read() != "step_00000003\n":
            FAILURES.append(f"train --overwrite replaces the run: {steps} steps logged, want 3")

        linked = os.path.join(d, "linked")
        os.makedirs(linked)
        with open(os.path.join(d, "elsewhere.csv"), "w") as f:
            f.write("precious\n")
        os.symlink(os.path.join(d, "elsewhere.csv"), os.path.join(linked, "train.csv"))
        rc, _, err = run(cli, tiny + ["--out", linked, "--steps", "2"], d)
        check("train output through a symbolic link", rc, err, 1, "train.csv' is a symbolic link")
        if open(os.path.join(d, "elsewhere.csv")).read() != "precious\n":
            FAILURES.append("train output through a symbolic link: the link's target changed")

        # A model the plan lets through (this machine has the memory) under an address-space limit
        # below it: the allocation fails and the run ends with an error (exit 1), not an abort
        # (134). Where the machine has less memory the plan refuses it instead, also exit 1.
        limit = 2 << 30
        cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        big = ["train", "--device", "cpu", "--d-model", "1024", "--d-ff", "8192", "--layers", "3", "--heads", "8",
               "--experts", "8", "--top-k", "2", "--seq-len", "128", "--vocab", "256", "--batch", "1",
               "--steps", "1", "--checkpoint-every", "-1", "--out", os.path.join(d, "big")]
        if subprocess.run([cli, "train", "--help"], capture_output=True, preexec_fn=cap).returncode != 0:
            print("skip train out of memory: the binary does not start under a 2 GiB address-space limit")
        else:
            p = subprocess.run([cli] + big, cwd=d, capture_output=True, text=True, timeout=120, preexec_fn=cap)
            check("train out of memory", p.returncode, p.stderr, 1, "memory")
            if os.path.exists(os.path.join(d, "big")):
                FAILURES.append("train out of memory: left its run directory behind")

    if FAILURES:
        print("\n".join("FAIL " + f for f in FAILURES))
        sys.exit(1)
    print("all train run-directory and memory cases behave")


if __name__ == "__main__":
    cases = argparse.ArgumentParser()
    cases.add_argument("--cli", required=True)
    run_dir_cases(os.path.abspath(cases.parse_known_args()[0].cli))
