"""``set_context`` / ``get_context``: run mode, device and JIT settings."""

from __future__ import annotations

import os

from . import events, log

GRAPH_MODE = 0
PYNATIVE_MODE = 1

JIT_DEFAULTS = {
    "dump_bytecode": os.environ.get("MSVM_DUMP_BYTECODE", "") == "1",
    "jit_level": os.environ.get("MSVM_JIT_LEVEL", "auto"),
    "enable_fusion": os.environ.get("MSVM_ENABLE_FUSION", "1") != "0",
    "memory_plan": os.environ.get("MSVM_MEMORY_PLAN", "1") != "0",    # compiler/memplan.py (issue 18)
    "l3_after": int(os.environ.get("MSVM_L3_AFTER", "5")),
    "jit_log_level": os.environ.get("MSVM_LOG", "WARNING"),
}

_ctx = {
    "mode": GRAPH_MODE,
    "device_target": "CPU",
    "device_id": 0,
    "jit_config": dict(JIT_DEFAULTS),
}


def _note_slow() -> None:
    """Keep events.SLOW's "L1" reason (jit_level L1 is the interpreter) in step with the settings."""
    (events.SLOW.add if _ctx["jit_config"]["jit_level"] == "L1" else events.SLOW.discard)("L1")


_note_slow()

_KNOWN = {"mode", "device_target", "device_id", "jit_config", "max_call_depth", "save_graphs", "pynative_synchronize",
          "jit_syntax_level"}
# MindSpore's jit_syntax_level values: msvm's frontend has one syntax (what construct may use is its
# own, documented in the README), so the level is recorded and checked, not acted on
STRICT, COMPATIBLE, LAX = 0, 1, 2


def gpu_problem() -> str | None:
    """Why the GPU cannot be used here, or None when it can."""
    try:
        import cupy  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"CuPy is not importable ({type(e).__name__}: {e}); install msvm[gpu] on a machine with CUDA"
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"no CUDA device is available ({type(e).__name__}: {e})"
    if n < 1:
        return "no CUDA device is available (device count is 0)"
    return None


def _select_device(target: str, device_id) -> str:
    """Make target's device current (msvm/device.py); returns the target that runs. Without a
    usable GPU, "GPU" runs on the CPU with a warning that names the CUDA problem, or raises it
    under MSVM_STRICT_DEVICE=1."""
    from . import device
    from .tensor import PARAMETER_SHAPES

    if target == "GPU":
        problem = gpu_problem()
        dev = None
        if problem is None:
            try:
                dev = device.get("GPU", device_id)
            except Exception as e:  # noqa: BLE001 - e.g. a device id CUDA does not have
                problem = f"the CUDA device {device_id} cannot be used ({type(e).__name__}: {e})"
        if problem is not None:
            if os.environ.get("MSVM_STRICT_DEVICE") == "1":
                raise RuntimeError(f"device_target='GPU': {problem}")
            log.logger.warning("device_target='GPU' requested but %s; running on the CPU "
                               "(MSVM_STRICT_DEVICE=1 makes this an error)", problem)
            target, dev = "CPU", device.CPU
    else:
        dev = device.get(target, device_id if target != "CPU" else 0)
    if device.use(dev) is not dev:
        from . import reasons

        reasons.device_changed(target)
        PARAMETER_SHAPES[0] += 1        # Codes linked for the old device are stale: Cells link again
    return target


# the jit_config options the compiled Code of a Cell depends on (fusion, the memory plan): a Cell keeps
# its compiled variants per their values (callpath.call), so after a change its next call compiles for
# the new ones, and a change back finds the old ones (jit_level is read by each site at every call instead)
RECOMPILE = ("enable_fusion", "memory_plan")
OPTIONS_EPOCH = [0]          # bumped by each change of them: a Cell's guard made under other values steps aside


def compile_options() -> tuple:
    """The values of the RECOMPILE options now."""
    c = _ctx["jit_config"]
    return bool(c["enable_fusion"]), bool(c["memory_plan"])


def _recompile(changed) -> None:
    from . import reasons

    reasons.option_changed(changed)
    OPTIONS_EPOCH[0] += 1


def set_context(**kwargs) -> None:
    for k, v in kwargs.items():
        if k not in _KNOWN:
            raise ValueError(f"set_context: unknown key {k!r}; known: {', '.join(sorted(_KNOWN))}")
        if k == "jit_syntax_level":
            if v not in (STRICT, COMPATIBLE, LAX):
                raise ValueError(f"set_context: jit_syntax_level must be ms.STRICT, ms.COMPATIBLE or ms.LAX, got {v!r}")
            _ctx["jit_syntax_level"] = v
        elif k == "mode":
            if v not in (GRAPH_MODE, PYNATIVE_MODE):
                raise ValueError(f"set_context: mode must be ms.GRAPH_MODE (0) or ms.PYNATIVE_MODE (1), got {v!r}")
            _ctx["mode"] = v
        elif k == "device_target":
            from . import device

            if v == "Ascend":
                raise ValueError("set_context: device_target='Ascend' is not supported by msvm (CPU and NVIDIA GPU only)")
            if v not in device.targets():
                raise ValueError(f"set_context: device_target must be 'CPU' or 'GPU', got {v!r}")
            _ctx["device_target"] = _select_device(v, kwargs.get("device_id", _ctx["device_id"]))
        elif k == "jit_config":
            if not isinstance(v, dict):
                raise TypeError("set_context: jit_config must be a dict")
            unknown = set(v) - set(JIT_DEFAULTS)
            if unknown:
                raise ValueError(f"jit_config: unknown keys {sorted(unknown)}; known: {sorted(JIT_DEFAULTS)}")
            if "jit_level" in v and v["jit_level"] not in ("auto", "L1", "L2", "L3"):
                raise ValueError(f"jit_config: jit_level must be 'auto', 'L1', 'L2' or 'L3', got {v['jit_level']!r}")
            changed = [(name, _ctx["jit_config"][name], v[name]) for name in RECOMPILE
                       if name in v and bool(v[name]) != bool(_ctx["jit_config"][name])]
            _ctx["jit_config"].update(v)
            if changed:
                _recompile(changed)
            if "jit_log_level" in v:
                log.set_level(v["jit_log_level"])
        else:
            _ctx[k] = v
    _note_slow()


def get_context(attr_key: str):
    if attr_key not in _ctx:
        raise ValueError(f"get_context: unknown key {attr_key!r}; known: {', '.join(sorted(_ctx))}")
    v = _ctx[attr_key]
    return dict(v) if isinstance(v, dict) else v


def mode() -> int:
    return _ctx["mode"]


def jit_option(name: str, override: dict | None = None):
    if override and name in override:
        return override[name]
    return _ctx["jit_config"][name]


class _PynativeExecutor:
    """``mindspore.common.api._pynative_executor``: MindSpore's tests call ``sync()`` to wait for
    queued PyNative work (so that its errors surface); msvm runs each op when it is called, so
    there is nothing to wait for."""

    def sync(self) -> None:
        return None


_pynative_executor = _PynativeExecutor()
