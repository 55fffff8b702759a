"""The strict format in which a student's kernel hands values back to the grader.

The grading run (autograder/execution/tworun.py) executes the tests in a kernel that never runs student
code; every call of a student's function is sent to the student's kernel, and the answer comes
back in this format. It knows only plain data:

    none, bool, int, float (hex, exact), complex, str, bytes, tuple, list, dict,
    tensor (dtype, shape, raw bytes), ndarray (dtype, shape, raw bytes), numpy scalar,
    iter (the items a generator yielded, then the exception it raised, if any),
    exc (an exception: the names of its classes, most derived first, and its message)

A message is MAGIC, the length of a JSON header, the header, and raw buffers whose lengths the
header lists. `validate` checks a message completely (types, dtype names, shapes against buffer
sizes, caps on sizes, counts and depth) with plain Python; the grader runs it on every answer
before passing it on, and the tests' kernel runs it again before `Decoder` rebuilds the values as
new objects of exactly the built-in types (a tensor comes back as a torch.Tensor, never a
subclass; nothing is unpickled). `Encoder` is what the student's kernel uses to write a message.

This file is imported by the grader and sent, as source, into both grading kernels; it imports
torch and numpy only inside the functions that need them.
"""

from __future__ import annotations

import json
import struct

MAGIC = b"LLMRLW1\n"
LIMITS = {
    "header_bytes": 8 << 20,     # the JSON header
    "total_bytes": 64 << 20,     # header and buffers together
    "nodes": 200_000,            # values in one message
    "depth": 40,                 # nesting
    "items": 100_000,            # items read from one generator
    "str_chars": 1 << 20,        # one string
    "msg_chars": 4000,           # an exception's message
    "ndim": 16,
}
TORCH_DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16,
                "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}
NUMPY_DTYPES = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
                "uint64": 8, "float16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16}
KEY_TYPES = ("none", "bool", "int", "float", "str", "tuple")


class WireError(ValueError):
    """A message that does not follow the format (names what is wrong)."""


# ----------------------------------------------------------------------------- framing

def pack(header: dict, buffers: list[bytes]) -> bytes:
    header = dict(header, buflens=[len(b) for b in buffers])
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return b"".join([MAGIC, struct.pack(">Q", len(text)), text, *buffers])


def _reject_constant(name):
    raise WireError(f"{name} is not allowed in a header")


def unpack(data: bytes) -> tuple[dict, list[memoryview]]:
    """The header and the buffers of a message; framing errors raise WireError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError("not bytes")
    if len(data) > LIMITS["total_bytes"]:
        raise WireError(f"message of {len(data)} bytes is over the {LIMITS['total_bytes']} byte limit")
    if bytes(data[:len(MAGIC)]) != MAGIC or len(data) < len(MAGIC) + 8:
        raise WireError("not a grader message")
    (n,) = struct.unpack(">Q", bytes(data[len(MAGIC):len(MAGIC) + 8]))
    start = len(MAGIC) + 8
    if n > LIMITS["header_bytes"] or start + n > len(data):
        raise WireError("header length out of range")
    try:
        header = json.loads(bytes(data[start:start + n]).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as e:
        if isinstance(e, WireError):
            raise
        raise WireError(f"header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    lens = header.get("buflens")
    if not isinstance(lens, list) or not all(type(x) is int and x >= 0 for x in lens):
        raise WireError("buflens must be a list of sizes")
    view = memoryview(data)[start + n:]
    if sum(lens) != len(view):
        raise WireError(f"buffers hold {len(view)} bytes, the header says {sum(lens)}")
    buffers, pos = [], 0
    for length in lens:
        buffers.append(view[pos:pos + length])
        pos += length
    return header, buffers


# ----------------------------------------------------------------------------- validation

class _Check:
    def __init__(self, buffers):
        self.buffers = buffers
        self.used = set()
        self.nodes = 0

    def buf(self, idx, size: int | None, where: str) -> None:
        if type(idx) is not int or not 0 <= idx < len(self.buffers):
            raise WireError(f"{where}: buffer index {idx!r} out of range")
        if idx in self.used:
            raise WireError(f"{where}: buffer {idx} used twice")
        self.used.add(idx)
        if size is not None and len(self.buffers[idx]) != size:
            raise WireError(f"{where}: buffer {idx} holds {len(self.buffers[idx])} bytes, expected {size}")

    def shape(self, shape, where: str) -> int:
        if not isinstance(shape, list) or len(shape) > LIMITS["ndim"]:
            raise WireError(f"{where}: bad shape")
        n = 1
        for s in shape:
            if type(s) is not int or s < 0:
                raise WireError(f"{where}: bad shape {shape!r}")
            n *= s
            if n > LIMITS["total_bytes"]:
                raise WireError(f"{where}: shape {shape!r} is too large")
        return n

    def exc(self, node, where: str) -> None:
        if not isinstance(node, dict) or node.get("t") != "exc":
            raise WireError(f"{where}: not an exception")
        types, msg = node.get("types"), node.get("msg")
        if not isinstance(types, list) or not 1 <= len(types) <= 64 or not all(
                isinstance(t, str) and 0 < len(t) <= 200 for t in types):
            raise WireError(f"{where}: bad exception class names")
        if not isinstance(msg, str) or len(msg) > LIMITS["msg_chars"]:
            raise WireError(f"{where}: bad exception message")

    def node(self, node, depth: int = 0, where: str = "value", top: bool = False) -> None:
        self.nodes += 1
        if self.nodes > LIMITS["nodes"]:
            raise WireError(f"more than {LIMITS['nodes']} values")
        if depth > LIMITS["depth"]:
            raise WireError(f"{where}: nested more than {LIMITS['depth']} deep")
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise WireError(f"{where}: not a value")
        t, v = node["t"], node.get("v")
        allowed = {"none": {"t"}, "bool": {"t", "v"}, "int": {"t", "v"}, "float": {"t", "v"}, "complex": {"t", "v"},
                   "str": {"t", "v"}, "bytes": {"t", "b"}, "tuple": {"t", "v"}, "list": {"t", "v"},
                   "dict": {"t", "v"}, "tensor": {"t", "dtype", "shape", "b", "rg", "gi"},
                   "ndarray": {"t", "dtype", "shape", "b"}, "npscalar": {"t", "dtype", "b"},
                   "iter": {"t", "v", "exc", "cut"}}
        if t not in allowed or not set(node) <= allowed[t]:
            raise WireError(f"{where}: unknown value kind {t!r} or fields {sorted(node)}")
        if t == "bool" and type(v) is not bool:
            raise WireError(f"{where}: bad bool")
        elif t == "int" and type(v) is not int:
            raise WireError(f"{where}: bad int")
        elif t == "float":
            _hexfloat(v, where)
        elif t == "complex":
            if not isinstance(v, list) or len(v) != 2:
                raise WireError(f"{where}: bad complex")
            _hexfloat(v[0], where), _hexfloat(v[1], where)
        elif t == "str" and (not isinstance(v, str) or len(v) > LIMITS["str_chars"]):
            raise WireError(f"{where}: bad str")
        elif t == "bytes":
            self.buf(node.get("b"), None, where)
        elif t in ("tuple", "list"):
            if not isinstance(v, list):
                raise WireError(f"{where}: bad {t}")
            for i, item in enumerate(v):
                self.node(item, depth + 1, f"{where}[{i}]")
        elif t == "dict":
            if not isinstance(v, list):
                raise WireError(f"{where}: bad dict")
            for i, pair in enumerate(v):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError(f"{where}: bad dict item")
                self.key(pair[0], depth + 1, f"{where} key {i}")
                self.node(pair[1], depth + 1, f"{where}[key {i}]")
        elif t == "tensor":
            dt = node.get("dtype")
            if dt not in TORCH_DTYPES:
                raise WireError(f"{where}: tensor dtype {dt!r} is not one the grader accepts")
            self.buf(node.get("b"), self.shape(node.get("shape"), where) * TORCH_DTYPES[dt], where)
            if "rg" in node and type(node["rg"]) is not bool:
                raise WireError(f"{where}: bad rg")
            if "gi" in node and (type(node["gi"]) is not int or node["gi"] < 0):
                raise WireError(f"{where}: bad gi")
        elif t == "ndarray":
            dt = node.get("dtype")
            if dt not in NUMPY_DTYPES:
                raise WireError(f"{where}: array dtype {dt!r} is not one the grader accepts")
            self.buf(node.get("b"), self.shape(node.get("shape"), where) * NUMPY_DTYPES[dt], where)
        elif t == "npscalar":
            dt = node.get("dtype")
            if dt not in NUMPY_DTYPES:
                raise WireError(f"{where}: numpy scalar dtype {dt!r} is not one the grader accepts")
            self.buf(node.get("b"), NUMPY_DTYPES[dt], where)
        elif t == "iter":
            if not top:
                raise WireError(f"{where}: a generator is accepted as the returned value only")
            if not isinstance(v, list) or len(v) > LIMITS["items"] or type(node.get("cut")) is not bool:
                raise WireError(f"{where}: bad iter")
            for i, item in enumerate(v):
                self.node(item, depth + 1, f"{where} item {i}")
            if node.get("exc") is not None:
                self.exc(node["exc"], where)

    def key(self, node, depth, where) -> None:
        if not isinstance(node, dict) or node.get("t") not in KEY_TYPES:
            raise WireError(f"{where}: a dict key must be none, bool, int, float, str or a tuple of those")
        if node["t"] == "tuple":
            if not isinstance(node.get("v"), list):
                raise WireError(f"{where}: bad tuple key")
            for i, item in enumerate(node["v"]):
                self.key(item, depth + 1, f"{where}[{i}]")
        else:
            self.node(node, depth, where)


def _hexfloat(v, where: str) -> float:
    if not isinstance(v, str) or len(v) > 40:
        raise WireError(f"{where}: bad float")
    try:
        return float.fromhex(v)
    except (ValueError, OverflowError):
        raise WireError(f"{where}: bad float {v!r}") from None


RESULT_FIELDS = {"ok", "value", "error", "mutated", "gens", "rng", "grads", "buflens", "calls"}


def validate(data: bytes) -> tuple[dict, list[memoryview]]:
    """Check a student's answer completely; returns (header, buffers) or raises WireError."""
    header, buffers = unpack(data)
    if not set(header) <= RESULT_FIELDS or type(header.get("ok")) is not bool:
        raise WireError(f"unknown header fields {sorted(set(header) - RESULT_FIELDS)} or no 'ok'")
    c = _Check(buffers)
    if header["ok"]:
        if "grads" in header:
            if not isinstance(header["grads"], list):
                raise WireError("grads must be a list")
            for i, g in enumerate(header["grads"]):
                c.node(g, 1, f"gradient {i}")
                if g["t"] not in ("none", "tensor"):
                    raise WireError(f"gradient {i}: must be a tensor or none")
        else:
            c.node(header.get("value"), 0, "returned value", top=True)
    else:
        c.exc(header.get("error"), "raised exception")
    for key in ("mutated", "gens"):
        items = header.get(key, [])
        if not isinstance(items, list):
            raise WireError(f"{key} must be a list")
        for item in items:
            if not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int or item[0] < 0:
                raise WireError(f"bad {key} entry")
            c.node(item[1], 1, f"{key} {item[0]}")
            if key == "gens" and (item[1]["t"] != "tensor" or item[1]["dtype"] != "uint8"):
                raise WireError("a generator state must be a uint8 tensor")
    rng = header.get("rng")
    if rng is not None:
        if not isinstance(rng, dict) or not set(rng) <= {"torch", "numpy", "python"}:
            raise WireError("bad rng")
        for k, node in rng.items():
            c.node(node, 1, f"rng {k}")
    if len(c.used) != len(buffers):
        raise WireError("a buffer that no value uses")
    return header, buffers


# ----------------------------------------------------------------------------- encoding (student side)

class Encoder:
    """Plain-data nodes for values; collects the raw buffers. Runs in the student's kernel."""

    def __init__(self, grad_outputs: list | None = None):
        self.buffers: list[bytes] = []
        self.count = 0
        self.grad_outputs = grad_outputs  # a list to collect output tensors that require grad

    def _buf(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def tensor(self, x, track: bool = True) -> dict:
        import torch

        if x.is_sparse or x.is_quantized or x.layout != torch.strided:
            raise TypeError("the grader accepts dense tensors only")
        rg = bool(x.requires_grad)
        t = x.detach()
        if type(t) is not torch.Tensor:
            t = t.as_subclass(torch.Tensor)
        t = t.cpu().resolve_conj().resolve_neg().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in TORCH_DTYPES:
            raise TypeError(f"the grader does not accept tensors of dtype {name}")
        if name == "bfloat16":
            raw = t.view(torch.int16).numpy().tobytes()
        elif name == "bool":
            raw = t.view(torch.uint8).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        node = {"t": "tensor", "dtype": name, "shape": list(t.shape), "b": self._buf(raw)}
        if rg and track and self.grad_outputs is not None:
            node["rg"] = True
            node["gi"] = len(self.grad_outputs)
            self.grad_outputs.append(x)
        return node

    def node(self, x, depth: int = 0, top: bool = False) -> dict:
        import sys

        # numpy and torch only if the kernel already uses them (a value of theirs cannot exist otherwise)
        np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
        self.count += 1
        if self.count > LIMITS["nodes"]:
            raise ValueError(f"the returned value holds more than {LIMITS['nodes']} values")
        if depth > LIMITS["depth"]:
            raise ValueError(f"the returned value is nested more than {LIMITS['depth']} deep")
        if x is None:
            return {"t": "none"}
        if isinstance(x, bool):
            return {"t": "bool", "v": bool(x)}
        if np is not None and isinstance(x, np.generic):
            arr = np.asarray(x)
            if arr.dtype.name not in NUMPY_DTYPES:
                raise TypeError(f"the grader does not accept numpy scalars of dtype {arr.dtype.name}")
            return {"t": "npscalar", "dtype": arr.dtype.name, "b": self._buf(arr.astype(arr.dtype.newbyteorder("<")).tobytes())}
        if isinstance(x, int):
            return {"t": "int", "v": int(x)}
        if isinstance(x, float):
            return {"t": "float", "v": float(x).hex()}
        if isinstance(x, complex):
            return {"t": "complex", "v": [float(x.real).hex(), float(x.imag).hex()]}
        if isinstance(x, str):
            if len(x) > LIMITS["str_chars"]:
                raise ValueError(f"a returned string is longer than {LIMITS['str_chars']} characters")
            return {"t": "str", "v": str(x)}
        if isinstance(x, (bytes, bytearray)):
            return {"t": "bytes", "b": self._buf(bytes(x))}
        if torch is not None and isinstance(x, torch.Tensor):
            return self.tensor(x)
        if np is not None and isinstance(x, np.ndarray):
            arr = np.ascontiguousarray(np.asarray(x))
            if arr.dtype.name not in NUMPY_DTYPES:
                raise TypeError(f"the grader does not accept numpy arrays of dtype {arr.dtype.name}")
            arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
            return {"t": "ndarray", "dtype": arr.dtype.name, "shape": list(arr.shape), "b": self._buf(arr.tobytes())}
        if isinstance(x, tuple):
            return {"t": "tuple", "v": [self.node(v, depth + 1) for v in tuple.__iter__(x)]}
        if isinstance(x, list):
            return {"t": "list", "v": [self.node(v, depth + 1) for v in list.__iter__(x)]}
        if isinstance(x, dict):
            return {"t": "dict", "v": [[self.key(k, depth + 1), self.node(v, depth + 1)] for k, v in dict.items(x)]}
        if top and _is_iterator(x):
            return self.iterator(x, depth)
        raise TypeError(f"the grader cannot bring back a value of type {type(x).__module__}.{type(x).__qualname__}")

    def key(self, k, depth) -> dict:
        if k is None or isinstance(k, (bool, int, float, str)) and not hasattr(k, "__array__"):
            return self.node(k, depth)
        if isinstance(k, tuple):
            return {"t": "tuple", "v": [self.key(v, depth + 1) for v in tuple.__iter__(k)]}
        raise TypeError(f"the grader cannot bring back a dict key of type {type(k).__qualname__}")

    def iterator(self, it, depth) -> dict:
        items, exc, cut = [], None, False
        try:
            for item in it:
                if len(items) >= LIMITS["items"]:
                    cut = True
                    break
                items.append(self.node(item, depth + 1))
        except Exception as e:  # the generator raised while it was read: replayed at the same point
            exc = exception(e)
        return {"t": "iter", "v": items, "exc": exc, "cut": cut}


def _is_iterator(x) -> bool:
    return hasattr(type(x), "__next__") and hasattr(type(x), "__iter__")


def exception(e: BaseException) -> dict:
    names = [c.__name__ for c in type(e).__mro__ if c is not object][:64]
    try:
        msg = str(e)
    except Exception:
        msg = "(the exception's message could not be read)"
    return {"t": "exc", "types": names or ["Exception"], "msg": msg[:LIMITS["msg_chars"]]}


# ----------------------------------------------------------------------------- decoding (trusted side)

# Exceptions a student's function may raise that come back as themselves; anything else comes back
# as the first of these in its class hierarchy (a custom ValueError subclass as ValueError).
_BUILTIN_EXCEPTIONS = None


def builtin_exceptions() -> dict:
    global _BUILTIN_EXCEPTIONS
    if _BUILTIN_EXCEPTIONS is None:
        import builtins

        _BUILTIN_EXCEPTIONS = {n: c for n, c in vars(builtins).items()
                               if isinstance(c, type) and issubclass(c, Exception)}
    return _BUILTIN_EXCEPTIONS


def rebuild_exception(node: dict) -> Exception:
    msg = node["msg"]
    known = builtin_exceptions()
    for name in node["types"]:
        cls = known.get(name)
        if cls is None:
            continue
        try:
            e = cls(msg) if name == node["types"][0] else cls(f"{node['types'][0]}: {msg}")
        except Exception:
            continue
        return e
    return RuntimeError(f"{node['types'][0]}: {msg}")


class Decoder:
    """Rebuild validated nodes as fresh objects of the built-in types. Runs in the tests' kernel."""

    def __init__(self, buffers):
        self.buffers = buffers

    def tensor(self, node):
        import torch

        dt = node["dtype"]
        raw = bytearray(self.buffers[node["b"]])
        shape = node["shape"]
        if dt == "bool":
            base = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            return (base != 0).reshape(shape).clone()
        dtype = getattr(torch, dt)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype).reshape(shape).clone()

    def value(self, node):
        import numpy as np

        t = node["t"]
        if t == "none":
            return None
        if t == "bool":
            return bool(node["v"])
        if t == "int":
            return int(node["v"])
        if t == "float":
            return float.fromhex(node["v"])
        if t == "complex":
            return complex(float.fromhex(node["v"][0]), float.fromhex(node["v"][1]))
        if t == "str":
            return str(node["v"])
        if t == "bytes":
            return bytes(self.buffers[node["b"]])
        if t == "tuple":
            return tuple(self.value(v) for v in node["v"])
        if t == "list":
            return [self.value(v) for v in node["v"]]
        if t == "dict":
            return {self.value(k): self.value(v) for k, v in node["v"]}
        if t == "tensor":
            return self.tensor(node)
        if t in ("ndarray", "npscalar"):
            dt = node["dtype"]
            raw = bytes(self.buffers[node["b"]])
            if dt == "bool":
                arr = np.frombuffer(raw, dtype=np.uint8) != 0
            else:
                arr = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<")).astype(np.dtype(dt))
            if t == "npscalar":
                return arr.reshape(())[()]
            return np.array(arr.reshape(node["shape"]), copy=True)
        if t == "iter":
            items = [self.value(v) for v in node["v"]]
            exc = rebuild_exception(node["exc"]) if node.get("exc") else None
            cut = node["cut"]
            return _replay(items, exc, cut)
        raise WireError(f"unknown value kind {t!r}")


def _replay(items, exc, cut):
    yield from items
    if exc is not None:
        raise exc
    if cut:
        raise RuntimeError(f"the grader stopped reading the generator after {LIMITS['items']} items")
