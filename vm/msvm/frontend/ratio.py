"""``Ratio``: a true division of a symbolic int by a positive int inside construct
(``(H - 1) / stride + 1``), kept exact so that ``int()``, ``math.floor`` and ``math.ceil``
make it a dim again (``int((H - 1) / 2 + 1)`` is ``(H - 1) // 2 + 1``), as Python computes
it on the concrete sizes. Dims are never negative, so ``int()`` (towards zero) is the floor.
Used anywhere else (a tensor operand) it becomes the run-time float it is.
"""

from __future__ import annotations

from ..bytecode.symbolic import Expr


def _int(v) -> bool:
    return isinstance(v, (int, Expr)) and not isinstance(v, bool)


class Ratio:
    __slots__ = ("num", "den")

    def __init__(self, num: Expr, den: int):
        self.num, self.den = Expr.of(num), den

    @staticmethod
    def of_div(a, b):
        """a / b for a symbolic int a and a positive int b (else None)."""
        if isinstance(a, Ratio) and isinstance(b, int) and not isinstance(b, bool) and b > 0:
            return Ratio(a.num, a.den * b)
        if isinstance(a, Expr) and isinstance(b, int) and not isinstance(b, bool) and b > 0:
            return Ratio(a, b)
        return None

    def add(self, other, sign: int = 1):
        if isinstance(other, Ratio):
            return Ratio(self.num * other.den + sign * other.num * self.den, self.den * other.den)
        return Ratio(self.num + sign * Expr.of(other) * self.den, self.den) if _int(other) else None

    def mul(self, other):
        return Ratio(self.num * Expr.of(other), self.den) if _int(other) else None

    def floor(self) -> Expr:
        return self.num // self.den

    def ceil(self) -> Expr:
        return (self.num + (self.den - 1)) // self.den

    def __repr__(self):
        return f"({self.num}) / {self.den}"


def ratio_binop(op: str, a, b):
    """The Ratio (or None) for ``a op b`` where one side is a Ratio and the other an int or
    symbolic int: ``+``, ``-`` (either side), ``*``, ``/`` by a positive int."""
    if op == "/":
        return Ratio.of_div(a, b)
    if isinstance(a, Ratio):
        return a.add(b) if op == "+" else a.add(b, -1) if op == "-" else a.mul(b) if op == "*" else None
    if isinstance(b, Ratio) and _int(a):
        if op == "+":
            return b.add(a)
        if op == "-":
            return Ratio(Expr.of(a) * b.den - b.num, b.den)
        if op == "*":
            return b.mul(a)
    return None
