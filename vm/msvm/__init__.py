"""msvm: a bytecode VM for dynamic-shape tensor programs, written the MindSpore way.

    import msvm as ms
    from msvm import nn, ops

Cells' ``construct`` methods and ``@ms.jit`` functions compile to tensor bytecode
with symbolic shapes, are verified before they run, and run in the interpreter.
"""

from . import bytecode, common, events, nn, ops
from .checkpoint import load_checkpoint, load_param_into_net, save_checkpoint
from .context import COMPATIBLE, GRAPH_MODE, LAX, PYNATIVE_MODE, STRICT, _pynative_executor, get_context, set_context  # noqa: F401
from .dtype import (
                    bool_,
                    complex64,
                    complex128,
                    double,
                    dtype_to_nptype,
                    float16,
                    float32,
                    float64,
                    float_,
                    half,
                    int8,
                    int16,
                    int32,
                    int64,
                    int_,
                    single,
                    uint8,
                    uint16,
                    uint32,
                    uint64,
)
from .errors import BytecodeError, ExecutionError, FrontendError, MsvmError, ShapeMismatch, VerifyError
from .interp.interpreter import set_trace
from .interp.rng import get_seed, set_seed  # noqa: F401 - MindSpore's global seed (issue 21)
from .jitfn import jit
from .ops.extra_ops import mutable  # noqa: F401 - (issue 21)
from .tensor import Parameter, ParameterTuple, Tensor

__version__ = "0.1.0"


def _start_telemetry():
    from . import telemetry

    telemetry.start_from_env()


def as_mindspore() -> None:
    """Make ``import mindspore`` (and ``mindspore.*``) resolve to msvm in this process (see msvm.compat)."""
    from .compat import as_mindspore as _as_mindspore

    _as_mindspore()


def cache_stats() -> dict:
    """Kernel cache statistics: hits, misses, hit_rate, compiles, disk_loads, recent (last 10 keys)."""
    from .compiler.tiers import stats

    return stats()


__all__ = ["GRAPH_MODE", "PYNATIVE_MODE", "BytecodeError", "ExecutionError", "FrontendError", "MsvmError",
           "Parameter", "ParameterTuple", "ShapeMismatch", "Tensor", "VerifyError", "as_mindspore", "bool_", "bytecode",
           "cache_stats",
           "common", "double", "dtype_to_nptype", "events", "float16", "float32", "float64", "float_", "get_context",
           "half", "int8", "int16", "int32", "int64", "int_", "jit", "load_checkpoint", "load_param_into_net", "nn",
           "ops", "save_checkpoint", "set_context", "set_trace", "single", "uint8", "uint16", "uint32", "uint64",
           "complex64", "complex128"]

_start_telemetry()
