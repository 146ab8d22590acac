"""Native entries: a loaded kernel called as a Python builtin, without ctypes.

A kernel is a C function taking data pointers and sizes. Calling it through ctypes costs a
libffi call, one helper object per pointer and a Python closure that lays out the arguments;
right after a big BLAS call has evicted them from the caches, those cost more than the
rest of a compiled Cell's call (bench/interp_overhead.py). An entry is a builtin function
(``PyCFunction``, METH_FASTCALL) whose C body is a trampoline generated here:

    entry(in0, in1, ..., out) -> out

It checks that it got the number of arguments it was made for and that each argument it reads
is exactly an ``ndarray``, reads each one's data pointer from the array header, releases the GIL
for a large kernel, calls the kernel with those pointers and the constants (sizes, strides, the
BLAS function) stored in the entry's ``self`` (an int64 array), and returns ``out``. Anything else
raises TypeError. Shapes, strides and dtypes are not checked here: an entry is only called by a
replay (interp/replay.py) for inputs whose signature and strides are the ones the kernel was
prepared for.

A trampoline depends only on its argument pattern (which argument is a constant, which a
pointer); every address it needs (the kernel, ``PyArray_Type``, the GIL functions) is in the
constants, so its object code is the same in every process and goes through the kernel cache's
disk like a kernel's (not counted as one). Entries exist only where the ndarray header layout
was checked at import (``LAYOUT``): a CPython with the classic object header and numpy's
``PyArrayObject_fields``.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

import numpy as np

from .. import log
from .cache import make_key

_at = ctypes.c_void_p.from_address
_OB_TYPE = ctypes.sizeof(ctypes.c_ssize_t)                   # PyObject: ob_refcnt, ob_type
_DATA = _OB_TYPE + ctypes.sizeof(ctypes.c_void_p)            # PyArrayObject_fields.data


def _probe_layout() -> bool:
    """Whether every probe array's type is at offset 8 and its data pointer at 16."""
    base = np.arange(24.0).reshape(4, 6)
    probes = [base, base[1:], base[:, 2:].T, np.empty(0, np.float32), np.float32(1.0) * np.ones(3, np.float32)]
    try:
        return all(_at(id(a) + _DATA).value == a.ctypes.data and _at(id(a) + _OB_TYPE).value == id(np.ndarray)
                   for a in probes)
    except (ValueError, OSError):
        return False


LAYOUT = _probe_layout()


def _data_pointer_reader():
    """``data_pointer(a)`` for an ndarray: ``ctypes.data`` builds a helper object (~2 µs, more than a
    small kernel); the pointer is the first field after the object header (numpy's
    ``PyArrayObject_fields.data``, what ``PyArray_DATA`` reads), ~0.3 µs through ctypes, where
    ``LAYOUT`` holds; ``ctypes.data`` elsewhere."""
    if LAYOUT:
        return lambda a: _at(id(a) + _DATA).value
    return lambda a: a.ctypes.data


data_pointer = _data_pointer_reader()

# the constants every entry starts with (its "self" array), before the kernel's own
HEAD = ("fn", "array_type", "save_thread", "restore_thread", "set_error", "type_error")
MESSAGE = b"msvm native entry: called with arguments other than the arrays it was prepared for"
METH_FASTCALL = 0x0080
METH_KEYWORDS = 0x0002


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_lock = threading.Lock()
_defs: dict = {}          # (pattern, nargs, release) or ("guard", pattern) -> _MethodDef or None (failed);
#                           kept for the process: the function objects point at their definition
_head = None


def _api_addresses(names: tuple):
    """The addresses of these C API functions in this interpreter, or None where one is not
    exported (an interpreter where guards are not made)."""
    try:
        return [ctypes.cast(getattr(ctypes.pythonapi, n), ctypes.c_void_p).value for n in names]
    except AttributeError:
        return None


def _head_values() -> list:
    global _head
    if _head is None:
        addr = _api_addresses(("PyEval_SaveThread", "PyEval_RestoreThread", "PyErr_SetString"))
        _head = [id(np.ndarray), *addr, id(TypeError)]
    return _head


def _prologue(lines: list) -> None:
    """%c: the int64 constants of the builtin's ``self`` array (its data pointer)."""
    lines += [f"  %sdp = getelementptr i8, i8* %self, i64 {_DATA}", "  %sdpp = bitcast i8* %sdp to i64**",
              "  %c = load i64*, i64** %sdpp"]


def _const(lines: list, k: int, v: str) -> None:
    """%v: constant k."""
    lines += [f"  %{v}p = getelementptr i64, i64* %c, i64 {k}", f"  %{v} = load i64, i64* %{v}p"]


def _load(lines: list, v: str, base: str, off: int, ty: str = "i64") -> None:
    """%v: the ``ty`` at byte offset ``off`` of the object at ``base``."""
    lines += [f"  %{v}a = getelementptr i8, i8* {base}, i64 {off}", f"  %{v}b = bitcast i8* %{v}a to {ty}*",
              f"  %{v} = load {ty}, {ty}* %{v}b"]


def trampoline_ir(name: str, pattern: tuple, nargs: int, release: bool) -> str:
    """The trampoline's LLVM IR. ``pattern``: the kernel's arguments in order, each ``"c"`` (the next
    constant after HEAD) or an int k (the data pointer of argument k; ``nargs - 1`` is ``out``)."""
    lines = [f"define i8* @{name}(i8* %self, i8** %args, i64 %nargs) nounwind {{", "entry:"]
    _prologue(lines)
    for k, h in enumerate(HEAD):
        _const(lines, k, h)
    read = sorted({p for p in pattern if p != "c"} | {nargs - 1})
    lines += [f"  %nok = icmp eq i64 %nargs, {nargs}", "  br i1 %nok, label %types, label %bad", "types:"]
    ok = "true"
    for k in read:
        lines += [f"  %a{k}p = getelementptr i8*, i8** %args, i64 {k}", f"  %a{k} = load i8*, i8** %a{k}p"]
        _load(lines, f"t{k}", f"%a{k}", _OB_TYPE)
        lines += [f"  %e{k} = icmp eq i64 %t{k}, %array_type", f"  %ok{k} = and i1 {ok}, %e{k}"]
        ok = f"%ok{k}"
    lines += [f"  br i1 {ok}, label %call, label %bad", "call:"]
    args, nconst = [], len(HEAD)
    for j, p in enumerate(pattern):
        if p == "c":
            _const(lines, nconst, f"k{j}")
            nconst += 1
        else:
            _load(lines, f"k{j}", f"%a{p}", _DATA)
        args.append(f"i64 %k{j}")
    sig = ", ".join(["i64"] * len(pattern))
    if release:
        lines += ["  %save = inttoptr i64 %save_thread to i8* ()*", "  %ts = call i8* %save()"]
    lines += [f"  %f = inttoptr i64 %fn to void ({sig})*", f"  call void %f({', '.join(args)})"]
    if release:
        lines += ["  %restore = inttoptr i64 %restore_thread to void (i8*)*", "  call void %restore(i8* %ts)"]
    out = nargs - 1
    lines += [f"  %rc = bitcast i8* %a{out} to i64*", "  %r0 = load i64, i64* %rc", "  %r1 = add i64 %r0, 1",
              "  store i64 %r1, i64* %rc", f"  ret i8* %a{out}", "bad:",
              "  %seterr = inttoptr i64 %set_error to void (i64, i8*)*",
              f"  %msg = getelementptr [{len(MESSAGE) + 1} x i8], [{len(MESSAGE) + 1} x i8]* @msg, i64 0, i64 0",
              "  call void %seterr(i64 %type_error, i8* %msg)", "  ret i8* null", "}"]
    text = "".join(f"\\{b:02x}" if b < 32 or b > 126 or b in b'"\\' else chr(b) for b in MESSAGE)
    head = f'@msg = private unnamed_addr constant [{len(MESSAGE) + 1} x i8] c"{text}\\00"\n\n'
    return head + "\n".join(lines) + "\n"


def prepare(pattern: tuple, nargs: int, release: bool, cache) -> None:
    """Compile (or load from ``cache``'s disk, a KernelCache) the trampoline for ``pattern``, once
    per process; called on the thread that compiles the kernel, so no caller waits for it. A
    failure is logged and leaves the kernel to its ctypes caller."""
    _build((pattern, nargs, release), lambda name: trampoline_ir(name, pattern, nargs, release), cache)


def _build(key: tuple, ir_for, cache, flags: int = METH_FASTCALL) -> None:
    """Compile (or load) the trampoline ``ir_for(name)`` once per process under ``key``; ``flags``:
    its calling convention (METH_*)."""
    if key in _defs or not LAYOUT:
        return
    from .codegen import codegen  # (llvmlite is imported when something compiles)

    with _lock:
        if key in _defs:
            return
        try:
            cg = codegen()
            sig = repr(key)
            name = "msvm_entry_" + hashlib.sha256(sig.encode()).hexdigest()[:16]
            ir = ir_for(name)
            ck = make_key(ir, 2, "cpu-entry", cg.version, cg.target_id)
            disk = cache.load(ck, lambda obj: cg.load(obj, [name]))    # one that does not link is discarded
            if disk is not None:
                addr = disk[0][name]
            else:
                obj = cg.compile(ir, 2)[0]
                addr = cg.load(obj, [name])[name]
                cache.write(ck, obj, {"name": name, "entry": sig})
        except Exception as e:  # noqa: BLE001 - the Python path still runs
            log.logger.info("native entry %s not built: %s", key, e)
            _defs[key] = None
            return
        _defs[key] = _MethodDef(name.encode(), addr, flags, None)


def make(fn_addr: int, pattern: tuple, consts: list, nargs: int, release: bool):
    """``entry(*args) -> args[-1]`` calling the kernel at ``fn_addr`` with ``pattern``'s arguments
    (``consts`` in order for its ``"c"`` items); None when ``prepare`` has not built its trampoline."""
    d = _defs.get((pattern, nargs, release))
    if d is None:
        return None
    self = np.array([fn_addr, *_head_values(), *consts], dtype=np.int64)
    return _new(ctypes.addressof(d), self, None)


_new = ctypes.pythonapi.PyCFunction_NewEx
_new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


# ---------------------------------------------------------------- call guards
#
# A guard is the native front of one call signature of a Cell (callpath.Guard): called with
# the call's values (by position, or by keyword under the parameter's own name), it checks
# each is what the signature says — a Tensor whose array has the
# signature's rank, dims, strides and dtype (the same dtype object), or the same bool — and
# then calls the signature's replay with the arrays (PyObject_Vectorcall) and returns what it
# returns; anything else returns the guard's own constants array, which the caller takes as "not
# this signature". It does in a few loads and compares what building and hashing the signature
# key costs in Python. Constants: HEAD_GUARD, the parameter names, then per argument its
# expected values.

HEAD_GUARD = ("vectorcall", "replay", "tensor_type", "array_type", "slot", "alloc", "incref", "decref", "none",
              "slot_pshape", "slot_dtype", "out_descr", "out_dtype")
_ND, _DIMS, _STRIDES, _DESCR = 24, 32, 40, 56          # PyArrayObject_fields: nd, dimensions, strides, descr


def _probe_fields() -> bool:
    """Whether nd, dimensions, strides and descr sit where _ND.. say, on probe arrays."""
    if not LAYOUT:
        return False
    base = np.arange(24.0).reshape(4, 6)
    probes = [base, base[1:], base[:, 2:].T, np.empty((2, 0, 3), np.float32), np.float32(2.0) * np.ones(3),
              np.empty((), np.int64)]
    try:
        for a in probes:
            nd = ctypes.c_int.from_address(id(a) + _ND).value
            dims, strides = (ctypes.cast(_at(id(a) + off).value or 0, ctypes.POINTER(ctypes.c_int64))
                             for off in (_DIMS, _STRIDES))
            if (nd != a.ndim or tuple(dims[i] for i in range(nd)) != a.shape
                    or tuple(strides[i] for i in range(nd)) != a.strides or _at(id(a) + _DESCR).value != id(a.dtype)):
                return False
        return True
    except (ValueError, OSError):
        return False


FIELDS = _probe_fields()


def guard_ir(name: str, pattern: tuple) -> str:
    """The guard's LLVM IR. ``pattern``: per call value, ``("t", rank, passed)`` (a Tensor) or
    ``("b", passed)`` (a bool); ``passed``: whether the replay takes it."""
    n_pass = sum(1 for p in pattern if p[-1])
    lines = [f"define i8* @{name}(i8* %self, i8** %args, i64 %nargs, i8* %kwnames) {{", "entry:"]
    _prologue(lines)
    lines.append(f"  %argv = alloca i8*, i64 {max(n_pass, 1)}")

    blk = [0]

    def check(cond: str):          # go on when cond holds, else to %fail
        blk[0] += 1
        lines.extend([f"  br i1 {cond}, label %ok{blk[0]}, label %fail", f"ok{blk[0]}:"])

    for k, h in enumerate(HEAD_GUARD):
        _const(lines, k, h)
    # values by keyword follow the positional ones in args; each keyword must be the parameter's
    # own name object (the interned name) at its position: constants len(HEAD_GUARD) + position
    names = len(HEAD_GUARD)
    lines += ["  %kwnull = icmp eq i8* %kwnames, null", "  br i1 %kwnull, label %kw0, label %kwn", "kwn:"]
    _load(lines, "nkwv", "%kwnames", 16)
    lines += ["  br label %kw0", "kw0:", "  %nkw = phi i64 [ 0, %entry ], [ %nkwv, %kwn ]",
              "  %total = add i64 %nargs, %nkw", f"  %nok = icmp eq i64 %total, {len(pattern)}"]
    check("%nok")
    lines += ["  br label %kwloop", "kwloop:", f"  %i = phi i64 [ 0, %ok{blk[0]} ], [ %inext, %kwnext ]",
              "  %more = icmp slt i64 %i, %nkw", "  br i1 %more, label %kwbody, label %kwdone", "kwbody:",
              "  %ioff = shl i64 %i, 3", "  %itemoff = add i64 %ioff, 24",
              "  %itemp = getelementptr i8, i8* %kwnames, i64 %itemoff", "  %itempp = bitcast i8* %itemp to i64*",
              "  %item = load i64, i64* %itempp", "  %pos = add i64 %nargs, %i", f"  %cpos = add i64 %pos, {names}",
              "  %wantp = getelementptr i64, i64* %c, i64 %cpos", "  %want = load i64, i64* %wantp",
              "  %same = icmp eq i64 %item, %want", "  br i1 %same, label %kwnext, label %fail", "kwnext:",
              "  %inext = add i64 %i, 1", "  br label %kwloop", "kwdone:"]
    nconst, slot = names + len(pattern), 0
    for k, p in enumerate(pattern):
        lines += [f"  %v{k}p = getelementptr i8*, i8** %args, i64 {k}", f"  %v{k} = load i8*, i8** %v{k}p"]
        if p[0] == "b":
            _const(lines, nconst, f"want{k}")
            nconst += 1
            lines.append(f"  %vi{k} = ptrtoint i8* %v{k} to i64")
            lines.append(f"  %isb{k} = icmp eq i64 %vi{k}, %want{k}")
            check(f"%isb{k}")
            arr = f"%v{k}"
        else:
            rank = p[1]
            _load(lines, f"vt{k}", f"%v{k}", _OB_TYPE)
            lines.append(f"  %ist{k} = icmp eq i64 %vt{k}, %tensor_type")
            check(f"%ist{k}")
            lines += [f"  %sa{k} = getelementptr i8, i8* %v{k}, i64 %slot", f"  %sb{k} = bitcast i8* %sa{k} to i8**",
                      f"  %a{k} = load i8*, i8** %sb{k}", f"  %nn{k} = icmp ne i8* %a{k}, null"]
            check(f"%nn{k}")
            _load(lines, f"at{k}", f"%a{k}", _OB_TYPE)
            lines.append(f"  %isa{k} = icmp eq i64 %at{k}, %array_type")
            check(f"%isa{k}")
            _load(lines, f"nd{k}", f"%a{k}", _ND, "i32")
            _load(lines, f"ds{k}", f"%a{k}", _DESCR)
            _const(lines, nconst, f"wd{k}")
            nconst += 1
            lines += [f"  %ndok{k} = icmp eq i32 %nd{k}, {rank}", f"  %dsok{k} = icmp eq i64 %ds{k}, %wd{k}",
                      f"  %hd{k} = and i1 %ndok{k}, %dsok{k}"]
            check(f"%hd{k}")
            if rank:
                _load(lines, f"dp{k}", f"%a{k}", _DIMS, "i64*")
                _load(lines, f"sp{k}", f"%a{k}", _STRIDES, "i64*")
                ok = "true"
                for which, ptr in (("d", f"%dp{k}"), ("s", f"%sp{k}")):
                    for i in range(rank):
                        v = f"{which}{k}_{i}"
                        _const(lines, nconst, f"w{v}")
                        nconst += 1
                        lines += [f"  %{v}a = getelementptr i64, i64* {ptr}, i64 {i}",
                                  f"  %{v} = load i64, i64* %{v}a", f"  %{v}e = icmp eq i64 %{v}, %w{v}",
                                  f"  %{v}o = and i1 {ok}, %{v}e"]
                        ok = f"%{v}o"
                check(ok)
            arr = f"%a{k}"
        if p[-1]:
            lines += [f"  %slot{k} = getelementptr i8*, i8** %argv, i64 {slot}", f"  store i8* {arr}, i8** %slot{k}"]
            slot += 1
    lines += ["  %vc = inttoptr i64 %vectorcall to i8* (i8*, i8**, i64, i8*)*",
              "  %rp = inttoptr i64 %replay to i8*",
              f"  %r = call i8* %vc(i8* %rp, i8** %argv, i64 {n_pass}, i8* null)",
              # an array of the output's dtype comes back as a Tensor made here (what the executor's
              # wrap does: a new Tensor, _data the array, _pshape None, _dtype the msvm dtype)
              "  %rnull = icmp eq i8* %r, null", "  br i1 %rnull, label %raw, label %isarr", "isarr:"]
    _load(lines, "rtype", "%r", _OB_TYPE)
    lines += ["  %rta = icmp eq i64 %rtype, %array_type", "  br i1 %rta, label %isarr2, label %raw", "isarr2:"]
    _load(lines, "rdescr", "%r", _DESCR)        # (read only once the result is known to be an array)
    lines += ["  %rdo = icmp eq i64 %rdescr, %out_descr", "  br i1 %rdo, label %wrap, label %raw", "wrap:",
              "  %wtt = inttoptr i64 %tensor_type to i8*", "  %walloc = inttoptr i64 %alloc to i8* (i8*, i64)*",
              "  %t = call i8* %walloc(i8* %wtt, i64 0)", "  %tnull = icmp eq i8* %t, null",
              "  br i1 %tnull, label %nomem, label %fill", "fill:",
              "  %winc = inttoptr i64 %incref to void (i8*)*",
              "  %wnone = inttoptr i64 %none to i8*", "  %wdt = inttoptr i64 %out_dtype to i8*",
              "  call void %winc(i8* %wnone)", "  call void %winc(i8* %wdt)"]
    for field, value in (("slot", "%r"), ("slot_pshape", "%wnone"), ("slot_dtype", "%wdt")):
        lines += [f"  %f{field} = getelementptr i8, i8* %t, i64 %{field}",
                  f"  %g{field} = bitcast i8* %f{field} to i8**", f"  store i8* {value}, i8** %g{field}"]
    lines += ["  ret i8* %t", "nomem:", "  %wdec = inttoptr i64 %decref to void (i8*)*", "  call void %wdec(i8* %r)",
              "  ret i8* null", "raw:", "  ret i8* %r",
              "fail:", "  %rc = bitcast i8* %self to i64*", "  %r0 = load i64, i64* %rc", "  %r1 = add i64 %r0, 1",
              "  store i64 %r1, i64* %rc", "  ret i8* %self", "}"]
    return "\n".join(lines) + "\n"


def prepare_guard(pattern: tuple, cache) -> None:
    """Compile (or load) the guard trampoline for ``pattern`` (on the background compiler)."""
    if FIELDS:
        _build(("guard", pattern), lambda name: guard_ir(name, pattern), cache, METH_FASTCALL | METH_KEYWORDS)


def guard_ready(pattern: tuple) -> bool | None:
    """True when built, None while not (yet), False when it failed."""
    d = _defs.get(("guard", pattern), 0)
    return None if d == 0 else d is not None


def make_guard(pattern: tuple, replay, tensor_type, slots: tuple, out, names: list, expected: list):
    """``guard(*values) -> replay(*arrays) | the guard's constants`` (see above), where an array
    result of ``out``'s dtype comes back as a Tensor: ``slots``, the offsets of a Tensor's
    ``_data``, ``_pshape`` and ``_dtype``; ``out``, (numpy dtype, msvm dtype) of the result, or
    None; ``names``: the parameters' names, in order (a value given by keyword must come under
    its own name). ``expected``: the constants after the names, in the order ``guard_ir`` reads
    them. The caller keeps ``replay``, ``out``, ``names`` and the dtype objects whose addresses are
    in ``expected`` alive while the guard lives."""
    d = _defs.get(("guard", pattern))
    if d is None:
        return None
    if len(names) != len(pattern):
        raise ValueError("a guard needs one parameter name per value")
    fns = _api_addresses(("PyObject_Vectorcall", "PyType_GenericAlloc", "Py_IncRef", "Py_DecRef"))
    if fns is None:
        return None
    out_ids = [id(out[0]), id(out[1])] if out is not None else [0, 0]
    self = np.array([fns[0], id(replay), id(tensor_type), id(np.ndarray), slots[0], fns[1], fns[2], fns[3], id(None),
                     slots[1], slots[2], *out_ids, *[id(n) for n in names], *expected], dtype=np.int64)
    return _new(ctypes.addressof(d), self, None), self
