#!/usr/bin/env python3
"""Writes the hand-made seeds of the formats/io regression corpus (npy/ and safetensors/).

Names: ok-* must parse, err-* must be rejected (io_corpus_test checks both). fuzz-* files are
the fuzzers' finds, kept by hand (docs/file-io.md): one input per distinct parser message, and
may do either.
Needs numpy and ml_dtypes. Re-running rewrites the seeds byte for byte.
"""
import io
import os
import struct

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def put(sub, name, data):
    with open(os.path.join(HERE, sub, name), "wb") as f:
        f.write(data)


def npy(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def npy_raw(dict_text, data, major=1, newline=True):
    prefix = 10 if major == 1 else 12
    h = dict_text.encode("latin-1")
    h += b" " * (63 - (prefix + len(h)) % 64) + (b"\n" if newline else b" ")
    length = struct.pack("<H" if major == 1 else "<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + length + h + data


def st_raw(header, buffer=b""):
    h = header.encode("utf-8") if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + buffer


def tensor(name, dtype, shape, begin, end):
    return f'"{name}":{{"dtype":"{dtype}","shape":{list(shape)},"data_offsets":[{begin},{end}]}}'.replace(" ", "")


def npy_seeds():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
    d24 = a.tobytes()
    put("npy", "ok-f32-2x3x4.npy", npy(a))
    put("npy", "ok-f64-scalar.npy", npy(np.float64(3.25)))
    put("npy", "ok-f16-rank1.npy", npy(np.arange(5, dtype=np.float16)))
    put("npy", "ok-bf16-ml_dtypes.npy", npy(np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)))
    put("npy", "ok-u8-empty-3x0.npy", npy(np.zeros((3, 0), np.uint8)))
    put("npy", "ok-i32-fortran-2x3x4.npy", npy(np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4))))
    put("npy", "ok-bool.npy", npy(np.array([True, False, True])))
    put("npy", "ok-v2-f32.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", d24, 2))
    put("npy", "ok-v3-f32.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", d24, 3))
    put("npy", "ok-python2-long.npy", npy_raw('{"descr": "<f4", "fortran_order": False, "shape": (2L, 12L)}', d24))
    bad = {
        "err-bad-magic.npy": b"\x93NUMPZ" + npy(a)[6:],
        "err-truncated-header.npy": npy(a)[:60],
        "err-truncated-data.npy": npy(a)[:-1],
        "err-trailing-data.npy": npy(a) + b"\0",
        "err-no-newline.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", d24, newline=False),
        "err-missing-shape.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, }", d24),
        "err-extra-key.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (24,), 'x': 0}", d24),
        "err-dup-key.npy": npy_raw("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (24,), }", d24),
        "err-big-endian.npy": npy_raw("{'descr': '>f4', 'fortran_order': False, 'shape': (24,), }", d24),
        "err-fp8-void1.npy": npy(np.zeros(4, ml_dtypes.float8_e4m3fn)),
        "err-structured.npy": npy(np.zeros(3, dtype=[("a", "<f4")])),
        "err-object.npy": npy_raw("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", b"\0" * 24),
        "err-shape-overflow.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", d24),
        "err-negative-dim.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (-24,), }", d24),
        "err-one-tuple-no-comma.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (24), }", d24),
        "err-header-len-huge.npy": b"\x93NUMPY\x02\x00\xff\xff\xff\xff" + npy(a)[10:],
        "err-version4.npy": npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (24,), }", d24, 4),
        "err-bad-bool.npy": npy_raw("{'descr': '<f4', 'fortran_order': 0, 'shape': (24,), }", d24),
        "err-unterminated-string.npy": npy_raw("{'descr: <f4, fortran_order: False, shape: (24,), }", d24),
        "err-empty.npy": b"",
    }
    for name, data in bad.items():
        put("npy", name, data)


def st_seeds():
    f32 = np.arange(6, dtype=np.float32).tobytes()
    put("safetensors", "ok-empty.safetensors", st_raw("{}      "))
    put("safetensors", "ok-metadata-only.safetensors", st_raw('{"__metadata__":{"format":"pt"}}     '))
    put("safetensors", "ok-f32.safetensors", st_raw("{" + tensor("w", "F32", [2, 3], 0, 24) + "}", f32))
    # Every dtype, a scalar and empty tensors, in the reference writer's order.
    parts, buf, off = [], b"", 0
    for name, dt, shape, size in [("d", "F64", [1], 8), ("w", "F32", [], 4), ("i", "I32", [1], 4),
                                  ("b", "BF16", [2], 4), ("h", "F16", [0, 2], 0), ("e4", "F8_E4M3", [3], 3),
                                  ("e5", "F8_E5M2", [1], 1), ("e8", "F8_E8M0", [1], 1), ("u", "U8", [2, 0], 0)]:
        parts.append(tensor(name, dt, shape, off, off + size))
        buf += bytes(range(1 + off, 1 + off + size))
        off += size
    put("safetensors", "ok-all-dtypes.safetensors", st_raw("{" + ",".join(parts) + "}", buf))
    # Valid but unaligned (a 1-byte tensor first) and unpadded: readers must use memcpy.
    put("safetensors", "ok-unaligned.safetensors",
        st_raw("{" + tensor("a", "U8", [1], 0, 1) + "," + tensor("b", "F32", [2], 1, 9) + "}", b"\1" + f32[:8]))
    one = tensor("a", "U8", [4], 0, 4)
    bad = {
        "err-short.safetensors": b"\x08\0\0",
        "err-header-len-huge.safetensors": struct.pack("<Q", 2**63) + b"{}",
        "err-header-past-end.safetensors": struct.pack("<Q", 64) + b"{}",
        "err-malformed-json.safetensors": st_raw('{"a":{"dtype":"U8",', b"\0" * 4),
        "err-root-array.safetensors": st_raw("[]"),
        "err-unknown-dtype.safetensors": st_raw('{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', b"\0" * 8),
        "err-offsets-out-of-range.safetensors": st_raw("{" + one + "}", b"\0" * 2),
        "err-begin-after-end.safetensors": st_raw("{" + tensor("a", "U8", [0], 4, 0) + "}", b"\0" * 4),
        "err-overlap.safetensors": st_raw("{" + one + "," + tensor("b", "U8", [4], 2, 6) + "}", b"\0" * 6),
        "err-hole.safetensors": st_raw("{" + one + "," + tensor("b", "U8", [2], 6, 8) + "}", b"\0" * 8),
        "err-trailing.safetensors": st_raw("{" + one + "}", b"\0" * 5),
        "err-shape-mismatch.safetensors": st_raw("{" + tensor("a", "F32", [2], 0, 4) + "}", b"\0" * 4),
        "err-shape-overflow.safetensors": st_raw("{" + tensor("a", "U8", [2**32, 2**32], 0, 0) + "}"),
        "err-dim-over-int64.safetensors": st_raw("{" + tensor("a", "U8", [2**64 - 1], 0, 0) + "}"),
        "err-negative-dim.safetensors": st_raw('{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}'),
        "err-float-dim.safetensors": st_raw('{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}}'),
        "err-duplicate-name.safetensors": st_raw("{" + one + "," + one + "}", b"\0" * 4),
        "err-duplicate-field.safetensors": st_raw('{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}'),
        "err-missing-offsets.safetensors": st_raw('{"a":{"dtype":"U8","shape":[0]}}'),
        "err-unknown-field.safetensors": st_raw('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}}'),
        "err-metadata-not-string.safetensors": st_raw('{"__metadata__":{"k":1}}'),
        "err-deep-nesting.safetensors": st_raw("[" * 10000),
        "err-deep-in-metadata.safetensors": st_raw('{"__metadata__":{"k":' + "[" * 10000),
        "err-bom.safetensors": st_raw(b"\xef\xbb\xbf{}"),
        "err-invalid-utf8.safetensors": st_raw(b'{"\xff":{}}'),
        "err-three-offsets.safetensors": st_raw('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}}'),
    }
    for name, data in bad.items():
        put("safetensors", name, data)


if __name__ == "__main__":
    os.makedirs(os.path.join(HERE, "npy"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "safetensors"), exist_ok=True)
    npy_seeds()
    st_seeds()
