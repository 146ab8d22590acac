"""Frontend: Python AST of construct / jit functions -> bytecode (see compiler.py)."""

from .argspec import ArgSpec, arg_spec, tensor_spec
from .compiler import FunctionSource, compile_cell_for, compile_function, source_of
from .graph import GraphValue

__all__ = ["ArgSpec", "FunctionSource", "GraphValue", "arg_spec", "compile_cell_for", "compile_function", "source_of",
           "tensor_spec"]
