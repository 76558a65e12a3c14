"""Mutations of .safetensors files, shared by the reader fuzz tests: the length field, the JSON
header's text, types, dtypes, shapes, offsets, keys, names and metadata, and well-formed variants.
Every mutation is `f(rng, bytes) -> bytes`."""
import json

import numpy as np

from fuzz_readers_common import M64

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
BAD_DTYPES = ["F31", "", "f32", "FLOAT", "F8_E4M3FN", "F4", "C64", "STR", " F32", "F32\u0000", 32, None, ["F32"]]
BAD_INTS = [-1, -(1 << 63), (1 << 63) - 1, 1 << 63, 1 << 64, 1 << 40, 1 << 32, 0.5, 1e300, "4", None, True, [4]]


def st_split(b):
    n = int.from_bytes(b[:8], "little")
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_join(header, data, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + data


def st_tensors(b):
    """(metadata or None, [[name, dtype, shape, bytes]] in offset order)."""
    header, data = st_split(b)
    meta = header.pop("__metadata__", None)
    ts = [[k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]] for k, v in header.items()]
    return meta, sorted(ts, key=lambda t: header[t[0]]["data_offsets"][0])


def st_build(meta, ts):
    """A well-formed file of `ts` laid out back to back in list order."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in ts:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return st_join(header, data)


def _entry(rng, header):
    names = [k for k in header if k != "__metadata__"]
    return rng.choice(names) if names else None


def st_header_len(rng, b):
    n = int.from_bytes(b[:8], "little")
    v = rng.choice([0, 1, 2, n - 1, n + 1, n + 8, len(b) - 8, len(b) - 7, len(b), 100_000_000, 100_000_001,
                    1 << 32, 1 << 63, M64, rng.randrange(1 << 64)])
    return (v & M64).to_bytes(8, "little") + b[8:]


def st_header_text(rng, b):
    """Random character edits inside the JSON text, the length field kept consistent."""
    n = int.from_bytes(b[:8], "little")
    h = bytearray(b[8:8 + n])
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(h))
        c = rng.choice([b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b"-", b"0", b"9", b"e", b"\x00",
                        b"\xff", b"\xc3", b"\n", b"\\u0000", b"\\ud800", b"null", b"1e999"])
        op = rng.randrange(3)
        if op == 0:
            h[i:i + 1] = c
        elif op == 1:
            h[i:i] = c
        else:
            del h[i]
    return st_join(bytes(h), b[8 + n:], pad=False)


def st_header_type(rng, b):
    _, data = st_split(b)
    text = rng.choice([b"[]", b"null", b"0", b'"x"', b"{}", b"true", b"{" * 100000, b"[" * 100000,
                       b'{"a":' * 5000 + b"1" + b"}" * 5000, b"", b"{\"__metadata__\":{}}"])
    return st_join(text, data)


def st_dtype(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        header[k]["dtype"] = rng.choice(list(DTYPE_SIZE) + BAD_DTYPES)
    return st_join(header, data)


def st_shape(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        shape = list(header[k]["shape"])
        choice = rng.randrange(6)
        if choice == 0 and shape:
            shape[rng.randrange(len(shape))] = rng.choice(BAD_INTS + [0, 1, 2])
        elif choice == 1:
            shape = shape + [1] * rng.choice((1, 60, 64, 65, 1000))
        elif choice == 2:
            shape = rng.choice([[], [0], [1 << 32, 1 << 32], [1 << 62, 4], [3037000500, 3037000500], [-4, -16]])
        elif choice == 3:
            shape = rng.choice(["[4]", 4, None, {"a": 1}, [[4]]])
        elif choice == 4:
            shape = list(reversed(shape))
        else:
            shape = shape[:-1]
        header[k]["shape"] = shape
    return st_join(header, data)


def st_offsets(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        begin, end = header[k]["data_offsets"]
        header[k]["data_offsets"] = rng.choice([
            [end, begin], [begin, end + 1], [begin - 1, end], [begin + 1, end + 1], [0, end - begin],
            [rng.choice(BAD_INTS), end], [begin, rng.choice(BAD_INTS)], [begin], [begin, end, end], [], "0,4",
            [begin, len(data) + 1], [len(data), len(data)], None])
    return st_join(header, data)


def st_duplicate_key(rng, b):
    """A key written twice in the JSON text (json.dumps cannot write that)."""
    header, data = st_split(b)
    k = _entry(rng, header)
    if not k:
        return b
    text = json.dumps(header, separators=(",", ":"))
    where = rng.randrange(3)
    if where == 0:  # the same tensor entry twice
        dup = json.dumps(k) + ":" + json.dumps(header[k], separators=(",", ":"))
    elif where == 1:  # a key inside an entry twice
        field = rng.choice(["dtype", "shape", "data_offsets"])
        dup = None
        entry = json.dumps(header[k], separators=(",", ":"))
        text = text.replace(entry, entry[:-1] + "," + json.dumps(field) + ":" + json.dumps(header[k][field]) + "}", 1)
    else:  # a metadata key twice
        meta = header.get("__metadata__") or {"format": "pt"}
        mk = rng.choice(list(meta) or ["format"])
        dup = '"__metadata__":' + json.dumps({mk: meta.get(mk, "pt")}, separators=(",", ":"))
    if dup:
        text = text[:-1] + "," + dup + "}"
    return st_join(text.encode(), data)


def st_missing_key(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        if rng.random() < 0.3:
            del header[k]  # its bytes now a hole in the buffer
        else:
            del header[k][rng.choice(["dtype", "shape", "data_offsets"])]
    return st_join(header, data)


def st_extra_key(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        header[k][rng.choice(["dtype ", "offsets", "__metadata__", ""])] = 1
    return st_join(header, data)


def st_entry_type(rng, b):
    header, data = st_split(b)
    k = rng.choice(list(header))
    header[k] = rng.choice([None, 1, "x", [], [1, 2], {}, True])
    return st_join(header, data)


def _rename(names):
    def mutate(rng, b):
        meta, ts = st_tensors(b)
        if ts:
            rng.choice(ts)[0] = rng.choice(names + [ts[0][0]])
        return st_build(meta, ts)
    return mutate


# Tensor names are the file's own strings and reach messages: odd ones, and ones with control
# characters (a newline would split a message line in two).
st_names = _rename(["", "a\u0000b", "x" * 70000, "\u00e9\u4e2d\U0001F600", "../x", "a/b", "__metadata__", "w.scale",
                    "w.data", "a\u2028b", "a b", "'", "%s%n"])
st_names_control = _rename(["\n", "a\nb", "a\rb", "\x1b[31mred\x1b[0m", "a\x7fb"])


def st_metadata(rng, b):
    header, data = st_split(b)
    meta = header.get("__metadata__") or {}
    choice = rng.randrange(5)
    if choice == 0:
        header["__metadata__"] = rng.choice([None, [], "x", 1, {"a": {"b": "c"}}])
    elif choice == 1 and meta:
        meta[rng.choice(list(meta))] = rng.choice([None, 1, [], {}, True, 1.5])
        header["__metadata__"] = meta
    elif choice == 2:
        meta[rng.choice(["", "\n", "x" * 5000, ".recipe", "w.recipe", "a\u0000b"])] = rng.choice(["", "\n", "mxfp8", "x" * 70000])
        header["__metadata__"] = meta
    elif choice == 3:
        header.pop("__metadata__", None)
    else:
        header["__metadata__"] = {str(i): str(i) for i in range(rng.choice((100, 20000)))}
    return st_join(header, data)


def st_valid_variant(rng, b):
    """A well-formed file that differs in content: a tensor retyped, reshaped, dropped (one of
    several) or reordered, its bytes resized to match (random bytes where it grows)."""
    meta, ts = st_tensors(b)
    if not ts:
        return b
    t = rng.choice(ts)
    choice = rng.randrange(4)
    if choice == 0:
        t[1] = rng.choice(list(DTYPE_SIZE))
    elif choice == 1:
        t[2] = rng.choice([[], [0], [1], [1, 1], [3, 0], [0, 5], [7], [1, 31], [33, 1], [2, 3, 5],
                           [1] * 64, [2] * 12, [16, 16], [17, 129], [300, 3]])
    elif choice == 2 and len(ts) > 1:
        ts.remove(t)
    else:
        rng.shuffle(ts)
    if choice < 2:
        n = int(np.prod(t[2], dtype=np.int64)) * DTYPE_SIZE[t[1]]
        t[3] = (t[3] + bytes(rng.randrange(256) for _ in range(max(0, n - len(t[3])))))[:n]
    return st_build(meta, ts)


def st_no_tensors(rng, b):
    """A well-formed file that holds no tensor at all (its metadata kept or not)."""
    meta, _ = st_tensors(b)
    return st_build(meta if rng.random() < 0.5 else None, [])


ST_MUTATIONS = {"st_header_len": st_header_len, "st_header_text": st_header_text, "st_header_type": st_header_type,
                "st_dtype": st_dtype, "st_shape": st_shape, "st_offsets": st_offsets,
                "st_duplicate_key": st_duplicate_key, "st_missing_key": st_missing_key, "st_extra_key": st_extra_key,
                "st_entry_type": st_entry_type, "st_names": st_names, "st_names_control": st_names_control,
                "st_metadata": st_metadata,
                "st_valid_variant": st_valid_variant, "st_no_tensors": st_no_tensors}