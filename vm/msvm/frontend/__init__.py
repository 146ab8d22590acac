"""Frontend: Python AST of construct / jit functions -> bytecode (see compiler.py)."""

from .compiler import ArgSpec, FunctionSource, compile_cell_for, compile_function, source_of
from .graph import GraphValue

__all__ = ["ArgSpec", "FunctionSource", "GraphValue", "compile_cell_for", "compile_function", "source_of"]
