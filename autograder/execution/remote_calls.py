"""Calls of a student's functions from the tests' kernel into the student's kernel.

The grading run (autograder/execution/tworun.py) has two kernels per notebook. The *tests' kernel* runs the
course's set-up cells and the test cells (hidden tests included), and never any student code: each
name the course's solution cells define is bound there to a proxy made by `make_proxy`. Calling
a proxy

1. pickles the arguments (trusted data, so pickle is fine in this direction) with every tensor,
   numpy array and torch.Generator taken out into a side table, together with the state of
   torch's, numpy's and Python's global random generators and whether gradients are enabled;
2. sends that to the grader over a unix socket (LLMRL_GRADER_RPC); the grader runs
   `serve(...)` in the *student's kernel*, which rebuilds the arguments, calls the student's
   function there and writes the answer in the strict format of autograder/execution/wire_format.py: the returned
   value, or the exception it raised; the post-call values of argument tensors and arrays the
   function changed in place; the advanced states of the generators it was given and of the global
   random generators; for outputs that need a gradient, a handle for the backward pass;
3. the grader checks the answer (wire.validate) and passes it back; the proxy checks it again and
   rebuilds every value as a new object of exactly the built-in type (wire.Decoder), copies the
   in-place changes into the caller's tensors and arrays, sets the generators' states, and either
   returns the value or raises the same built-in exception class with the same message (so
   `pytest.raises(ValueError)` and `except ValueError` in a test behave as with a local function).

Gradients: when arguments require a gradient and the student's outputs do, the outputs come back
wrapped in a torch.autograd.Function whose backward sends the output gradients to the student's
kernel, which answers with torch.autograd.grad of its own graph (kept for the last 64 calls). So
`loss.backward(); x.grad` in a test gives exactly the gradient of the student's code.

A generator or iterator the function returns is read out in the student's kernel (up to
wire.LIMITS["items"] items) and replayed, including an exception raised while it was read.

Whatever goes wrong with a call itself (no answer in time, the student's kernel died, an answer
outside the format) raises a `GraderCallError`, a BaseException, so that no `except Exception`
in a test can mistake it for the student's own error.

This file is sent, as source, into both grading kernels (the trusted half runs in the tests'
kernel, `serve` in the student's); the grader only imports it for its constants.
"""

from __future__ import annotations

import sys

FRAME = ">IQ"  # header length, body length


def _wire():
    w = sys.modules.get("_llmrl_wire")
    if w is None:  # imported by the grader itself
        from autograder.execution import wire_format as w
    return w


class GraderCallError(BaseException):
    """A call of a student's function that the grader could not complete."""


class StudentTimeout(GraderCallError):
    pass


class StudentKernelDied(GraderCallError):
    pass


class StudentProtocolError(GraderCallError):
    pass


ERRORS = {"timeout": StudentTimeout, "died": StudentKernelDied, "protocol": StudentProtocolError}

# ============================================================================ tests' kernel (trusted)

_state = {"path": None, "sock": None, "calls": 0}


def connect(path: str) -> None:
    _state["path"] = path


def _recv_exact(sock, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise StudentKernelDied("the grader closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _rpc(header: dict, body: bytes) -> bytes:
    import json
    import socket
    import struct

    if _state["sock"] is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(_state["path"])
        _state["sock"] = s
    sock = _state["sock"]
    h = json.dumps(header).encode()
    try:
        sock.sendall(struct.pack(FRAME, len(h), len(body)) + h + body)
        hl, bl = struct.unpack(FRAME, _recv_exact(sock, struct.calcsize(FRAME)))
        reply = json.loads(_recv_exact(sock, hl))
        data = _recv_exact(sock, bl)
    except BaseException:
        # an interrupted exchange leaves the stream out of step: start a new connection next time
        _state["sock"] = None
        try:
            sock.close()
        except OSError:
            pass
        raise
    status = reply.get("status")
    if status != "ok":
        raise ERRORS.get(status, StudentProtocolError)(reply.get("msg") or status)
    return data


def make_proxy(name: str):
    def proxy(*args, **kwargs):
        return _call(name, args, kwargs)

    proxy.__name__ = proxy.__qualname__ = name
    proxy.__module__ = "__main__"
    proxy.__doc__ = f"{name}, as the student's notebook defines it (it runs in the student's kernel)"
    proxy._llmrl_remote = name
    return proxy


def bind(names, namespace: dict) -> None:
    for name in names:
        namespace[name] = make_proxy(name)


def _global_rng():
    """The global random generators' states (torch's and numpy's if this kernel uses them)."""
    import random

    out = {"python": random.getstate()}
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.get_rng_state().numpy().tobytes()
    if np is not None:
        out["numpy"] = np.random.get_state()
    return out


def _tensor_spec(t) -> tuple:
    """(dtype name, shape, raw bytes) of a tensor: cheaper to send than a pickled tensor."""
    return (str(t.dtype).removeprefix("torch."), tuple(t.shape), raw(t))


def _tensor_from(spec):
    import torch

    dtype, shape, data = spec
    if not data:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    if dtype in ("bfloat16", "float16"):
        return torch.frombuffer(bytearray(data), dtype=torch.int16).view(getattr(torch, dtype)).reshape(shape)
    if dtype == "bool":
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(torch.bool).reshape(shape)
    return torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).reshape(shape)


def _set_global_rng(rng: dict, dec, sent: dict) -> None:
    import random

    if set(rng) != set(sent):
        raise StudentProtocolError("the answer carried other random states than the call sent")
    if "torch" in rng:
        import torch

        node = rng["torch"]
        if node["t"] != "tensor" or node["dtype"] != "uint8" or node["shape"] != list(torch.get_rng_state().shape):
            raise StudentProtocolError("the answer carried a malformed torch random state")
        torch.set_rng_state(dec.tensor(node))
    if "numpy" in rng:
        import numpy as np

        st = dec.value(rng["numpy"])
        ok = (isinstance(st, tuple) and len(st) == 5 and st[0] == "MT19937" and isinstance(st[1], np.ndarray)
              and st[1].dtype == np.uint32 and st[1].shape == (624,) and type(st[2]) is int and 0 <= st[2] <= 624
              and type(st[3]) is int and type(st[4]) is float)
        if not ok:
            raise StudentProtocolError("the answer carried a malformed numpy random state")
        np.random.set_state(st)
    if "python" in rng:
        import array

        st = dec.value(rng["python"])  # (the 625 words as 4-byte unsigned ints, gauss_next)
        ok = (isinstance(st, tuple) and len(st) == 2 and isinstance(st[0], bytes) and len(st[0]) == 2500
              and (st[1] is None or type(st[1]) is float))
        words = tuple(array.array("I", st[0])) if ok else ()
        if not ok or words[624] > 624:
            raise StudentProtocolError("the answer carried a malformed Python random state")
        random.setstate((3, words, st[1]))


class _Absent:
    """Stands for numpy or torch in isinstance checks when the kernel does not use them."""


def _pickle_call(name, args, kwargs):
    import io
    import pickle
    import types

    np_mod, torch_mod = sys.modules.get("numpy"), sys.modules.get("torch")
    Tensor = torch_mod.Tensor if torch_mod else _Absent
    Generator = torch_mod.Generator if torch_mod else _Absent
    ndarray = np_mod.ndarray if np_mod else _Absent
    tensors, gens, arrays, ids = [], [], [], {}

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            key = id(obj)
            if key in ids:
                return ids[key]
            if isinstance(obj, Tensor):
                tensors.append(obj)
                pid = ("T", len(tensors) - 1)
            elif isinstance(obj, Generator):
                if obj.device.type != "cpu":
                    raise pickle.PicklingError("only CPU generators can be passed to the student's code")
                gens.append(obj)
                pid = ("G", len(gens) - 1)
            elif isinstance(obj, ndarray):
                arrays.append(obj)
                pid = ("A", len(arrays) - 1)
            elif getattr(obj, "_llmrl_remote", None) and callable(obj):
                pid = ("P", obj._llmrl_remote)
            elif isinstance(obj, types.FunctionType) and obj.__module__ == "__main__":
                raise pickle.PicklingError(f"the test passes its own function {obj.__name__!r} to the student's "
                                           f"code; the grader cannot send functions defined in a test cell")
            else:
                return None
            ids[key] = pid
            return pid

    buf = io.BytesIO()
    Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump((args, kwargs))
    side = {"tensors": [(_tensor_spec(t), bool(t.requires_grad), isinstance(t, torch_mod.nn.Parameter))
                        for t in tensors],
            "gens": [g.get_state().numpy().tobytes() for g in gens],
            "arrays": [np_mod.array(a, copy=True) for a in arrays]}
    return buf.getvalue(), side, tensors, gens, arrays


class _Handle:
    def __init__(self, call_id, values, inputs):
        self.call_id = call_id
        self.values = values
        self.inputs = inputs


def _remote_grad_class():
    import torch

    cls = getattr(_remote_grad_class, "cls", None)
    if cls is not None:
        return cls

    class RemoteGrad(torch.autograd.Function):
        """Outputs computed in the student's kernel; backward asks it for the gradient."""

        @staticmethod
        def forward(ctx, handle, *inputs):
            ctx.handle = handle
            return tuple(v.detach().clone() for v in handle.values)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            return (None, *_vjp(ctx.handle, grads))

    _remote_grad_class.cls = RemoteGrad
    return RemoteGrad


def _vjp(handle, grads):
    import pickle

    import torch

    body = pickle.dumps({"op": "vjp", "call": handle.call_id,
                         "grads": [None if g is None else _tensor_spec(g) for g in grads]})
    data = _rpc({"op": "vjp", "call": handle.call_id}, body)
    w = _wire()
    try:
        header, buffers = w.validate(data)
    except w.WireError as e:
        raise StudentProtocolError(f"the gradient came back malformed: {e}") from None
    if not header["ok"]:
        raise w.rebuild_exception(header["error"]) from None
    dec = w.Decoder(buffers)
    nodes = header.get("grads")
    if not isinstance(nodes, list) or len(nodes) != len(handle.inputs):
        raise StudentProtocolError("the gradient came back for the wrong number of inputs")
    out = []
    for node, inp in zip(nodes, handle.inputs):
        if node["t"] == "none":
            out.append(None)
            continue
        g = dec.tensor(node)
        if tuple(g.shape) != tuple(inp.shape) or not g.is_floating_point() and not g.is_complex():
            raise StudentProtocolError(f"a gradient of shape {tuple(g.shape)} came back for an input of shape "
                                       f"{tuple(inp.shape)}")
        out.append(g.to(inp.dtype))
    return out


def _call(name, args, kwargs):
    import pickle

    w = _wire()
    _state["calls"] += 1
    call_id = _state["calls"]
    try:
        payload, side, tensors, gens, arrays = _pickle_call(name, args, kwargs)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise StudentProtocolError(f"the arguments of {name}() cannot be sent to the student's kernel: {e}") from None
    torch = sys.modules.get("torch")
    rng = _global_rng()
    body = pickle.dumps({"op": "call", "name": name, "call": call_id,
                         "grad": torch.is_grad_enabled() if torch else True,
                         "rng": rng, "payload": payload, **side}, protocol=pickle.HIGHEST_PROTOCOL)
    data = _rpc({"op": "call", "name": name, "call": call_id}, body)
    try:
        header, buffers = w.validate(data)
    except w.WireError as e:
        raise StudentProtocolError(f"the answer of {name}() is malformed: {e}") from None
    dec = w.Decoder(buffers)
    _set_global_rng(header.get("rng") or {}, dec, rng)
    for idx, node in header.get("gens", []):
        if idx >= len(gens) or node["shape"] != list(gens[idx].get_state().shape):
            raise StudentProtocolError("the answer carried a malformed generator state")
        gens[idx].set_state(dec.tensor(node))
    for idx, node in header.get("mutated", []):
        new = dec.value(node)
        if idx < len(tensors):
            orig = tensors[idx]
            if not isinstance(new, torch.Tensor) or new.dtype != orig.dtype:
                raise StudentProtocolError("an argument changed in place came back with another type")
            with torch.no_grad():
                if new.shape != orig.shape:
                    orig.resize_(new.shape)
                orig.copy_(new)
        elif idx - len(tensors) < len(arrays):
            orig = arrays[idx - len(tensors)]
            if getattr(new, "dtype", None) != orig.dtype:
                raise StudentProtocolError("an argument changed in place came back with another type")
            if new.shape == orig.shape:
                orig[...] = new
            else:
                orig.resize(new.shape, refcheck=False)
                orig[...] = new
        else:
            raise StudentProtocolError("an in-place change names an argument that does not exist")
    if not header["ok"]:
        raise w.rebuild_exception(header["error"]) from None
    rg = {}
    value = _decode_tracking(dec, header["value"], rg)
    if rg:
        import torch

        inputs = [t for t in tensors if t.requires_grad]
        ordered = [rg[i] for i in sorted(rg)]
        if inputs and torch.is_grad_enabled():
            outs = _remote_grad_class().apply(_Handle(call_id, ordered, inputs), *inputs)
            swap = {id(old): new for old, new in zip(ordered, outs)}
        else:
            swap = {id(t): t.requires_grad_(True) for t in ordered if t.is_floating_point() or t.is_complex()}
        value = _swap(value, swap)
    return value


def _decode_tracking(dec, node, rg):
    """dec.value, noting the tensors the student's graph produced (node "gi")."""
    if node["t"] == "tensor":
        t = dec.tensor(node)
        if node.get("rg"):
            rg[node["gi"]] = t
        return t
    if node["t"] in ("tuple", "list"):
        items = [_decode_tracking(dec, v, rg) for v in node["v"]]
        return tuple(items) if node["t"] == "tuple" else items
    if node["t"] == "dict":
        return {dec.value(k): _decode_tracking(dec, v, rg) for k, v in node["v"]}
    return dec.value(node)


def _swap(value, swap):
    if id(value) in swap:
        return swap[id(value)]
    if type(value) is tuple:
        return tuple(_swap(v, swap) for v in value)
    if type(value) is list:
        return [_swap(v, swap) for v in value]
    if type(value) is dict:
        return {k: _swap(v, swap) for k, v in value.items()}
    return value


# ============================================================================ student's kernel

_graphs: dict = {}
MAX_GRAPHS = 64
_watched: dict = {}   # what the watch saw in the last request (read back with watch_report)


def _watch_start():
    """The answer-key watch (module _llmrl_watch, installed by the grader) around one request: what
    the student's code runs is reported with the answer (autograder/review/answer_key.py, watch_notes)."""
    _watched.clear()
    w = sys.modules.get("_llmrl_watch")
    if w is None:
        return None
    try:
        return w.start()
    except Exception as e:  # noqa: BLE001 - the watch's failure is itself reported
        _watched["tracer"] = [f"the watch could not start ({type(e).__name__})"]
        return None


def _watch_stop(watch) -> None:
    if watch is not None:
        try:
            _watched.update(watch.stop())
        except Exception as e:  # noqa: BLE001
            _watched["tracer"] = [f"the watch could not stop ({type(e).__name__})"]


def watch_report() -> str:
    """What the watch saw in the request just served, as JSON (evaluated right after serve, in the
    same execution, so it comes back with the answer)."""
    import json

    return json.dumps(_watched)


def _lookup(name: str):
    ns = vars(sys.modules["__main__"])  # the kernel's main namespace (what `import __main__` reads)
    if name not in ns:
        raise NameError(f"name {name!r} is not defined (the notebook does not define {name})")
    return ns[name]


def raw(t) -> bytes:
    import torch

    t = t.detach()
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    t = t.cpu().resolve_conj().resolve_neg().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.bool:
        return t.view(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


def serve(text: str) -> str:
    """Answer one request of the grader (base64 text in, base64 text out)."""
    import base64
    import pickle

    w = _wire()
    req = pickle.loads(base64.b64decode(text))
    if req["op"] == "call":
        data = _serve_call(req, w)
    elif req["op"] == "vjp":
        data = _serve_vjp(req, w)
    else:
        data = w.pack({"ok": True, "value": {"t": "none"}}, [])
    return base64.b64encode(data).decode("ascii")


def _serve_call(req, w) -> bytes:
    import io
    import pickle
    import random

    rng = req["rng"]
    uses_torch = "torch" in rng or req["tensors"] or req["gens"]
    torch = __import__("torch") if uses_torch else None
    np = __import__("numpy") if "numpy" in rng or req["arrays"] else None
    if "torch" in rng:
        torch.set_rng_state(torch.frombuffer(bytearray(rng["torch"]), dtype=torch.uint8))
    if "numpy" in rng:
        np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    tensors = []
    for spec, rg, is_param in req["tensors"]:
        t = _tensor_from(spec)
        t = torch.nn.Parameter(t, requires_grad=rg) if is_param else t.requires_grad_(rg)
        tensors.append(t)
    gens = []
    for state in req["gens"]:
        g = torch.Generator()
        g.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        gens.append(g)
    arrays = [np.array(a, copy=True) for a in req["arrays"]]
    before = [(raw(t), tuple(t.shape)) for t in tensors]
    abefore = [(a.tobytes(), a.shape) for a in arrays]
    inputs = [t for t in tensors if t.requires_grad]  # before the call: the function may change the flags

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid):
            kind, key = pid
            return {"T": tensors, "G": gens, "A": arrays}[kind][key] if kind != "P" else _lookup(key)

    import contextlib

    grad_outputs: list = []
    enc = w.Encoder(grad_outputs)
    with torch.set_grad_enabled(req["grad"]) if torch is not None else contextlib.nullcontext():
        watch = _watch_start()
        try:
            args, kwargs = Unpickler(io.BytesIO(req["payload"])).load()
            fn = _lookup(req["name"])
            out = fn(*args, **kwargs)
            header = {"ok": True, "value": enc.node(out, top=True)}  # a generator is read here, watched
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            del grad_outputs[:]
            enc = w.Encoder(None)
            header = {"ok": False, "error": w.exception(e)}
        finally:
            _watch_stop(watch)
    mutated = []
    for i, t in enumerate(tensors):
        if (raw(t), tuple(t.shape)) != before[i]:
            mutated.append([i, enc.tensor(t, track=False)])
    for i, a in enumerate(arrays):
        if (a.tobytes(), a.shape) != abefore[i]:
            mutated.append([len(tensors) + i, enc.node(a)])
    header["mutated"] = mutated
    header["gens"] = [[i, enc.tensor(g.get_state(), track=False)] for i, g in enumerate(gens)]
    import array

    version, words, gauss = random.getstate()
    header["rng"] = {"python": enc.node((array.array("I", words).tobytes(), gauss))}
    if "torch" in rng:
        header["rng"]["torch"] = enc.tensor(torch.get_rng_state(), track=False)
    if "numpy" in rng:
        header["rng"]["numpy"] = enc.node(np.random.get_state())
    if grad_outputs and inputs:
        _graphs[req["call"]] = (inputs, list(grad_outputs))
        while len(_graphs) > MAX_GRAPHS:
            del _graphs[next(iter(_graphs))]
    return w.pack(header, enc.buffers)


def _serve_vjp(req, w) -> bytes:
    import torch

    enc = w.Encoder(None)
    watch = _watch_start()
    try:
        if req["call"] not in _graphs:
            raise RuntimeError("the gradient of this call is no longer available (more than 64 calls ago)")
        inputs, outputs = _graphs[req["call"]]
        given = [None if g is None else _tensor_from(g) for g in req["grads"]]
        pairs = [(o, g) for o, g in zip(outputs, given) if g is not None]
        grads = torch.autograd.grad([o for o, _ in pairs], inputs, grad_outputs=[g for _, g in pairs],
                                    allow_unused=True, retain_graph=True) if pairs else [None] * len(inputs)
        header = {"ok": True, "grads": [{"t": "none"} if g is None else enc.tensor(g, track=False) for g in grads]}
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        enc = w.Encoder(None)
        header = {"ok": False, "error": w.exception(e)}
    finally:
        _watch_stop(watch)
    return w.pack(header, enc.buffers)
