"""The programs of fused instructions, and the one walker every reader of them uses.

A FUSED_ELEMENTWISE or FUSED_MATMUL instruction carries its expression as a postfix tuple of
nodes: ``("in", k)`` (input k), ``("c", value)`` (a constant) or ``(OPNAME, *operands)`` (an
elementwise row of the opcode table, which says how many values it pops). ``evaluate``
walks one with three callbacks: the shape rules type it, the interpreter runs it, the
compiler lowers it and the disassembler prints it, each through ``evaluate``.
"""

from __future__ import annotations

from typing import Callable

from .types import ShapeError


def evaluate(program, leaf: Callable, const: Callable, op: Callable, what: str = "program"):
    """The program's value: ``leaf(k)`` for inputs, ``const(v)`` for constants and
    ``op(row, args, operands)`` for each instruction (args bottom first)."""
    from .opcodes import BY_NAME

    stack: list = []
    for node in program:
        tag = node[0]
        if tag == "in":
            stack.append(leaf(node[1]))
        elif tag == "c":
            stack.append(const(node[1]))
        else:
            row = BY_NAME.get(tag)
            if row is None or row.kind != "elementwise":
                raise ShapeError(f"{what}: {tag!r} is not an elementwise instruction")
            n = row.pops
            if len(stack) < n:
                raise ShapeError(f"{what}: program underflows at {tag}")
            args = stack[len(stack) - n:]
            del stack[len(stack) - n:]
            stack.append(op(row, args, tuple(node[1:])))
    if len(stack) != 1:
        raise ShapeError(f"{what}: program leaves {len(stack)} values")
    return stack[0]
