"""``nn.Cell``: a model component whose ``construct`` runs as bytecode.

In GRAPH_MODE a call compiles ``construct`` for the argument signature (once),
links it to this instance and runs it in the VM; in PYNATIVE_MODE it runs
``construct`` as Python with eager ops. Parameters and sub-Cells assigned in
``__init__`` are registered, as in MindSpore.
"""

from __future__ import annotations

import inspect

from .. import callpath, reasons
from ..tensor import PARAMETER_SHAPES, Parameter, ParameterTuple, Tensor


class Cell:
    __msvm_cell__ = True
    _amp_level = "O0"       # (MindSpore's mixed-precision level, which construct code reads: msvm's to_float sets
    #                         a Cell's dtype, not a level; mindocr's RNN neck tests it)

    def __init__(self, auto_prefix=True, flags=None):
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_cells", {})
        object.__setattr__(self, "_auto_prefix", bool(auto_prefix))
        object.__setattr__(self, "training", False)
        object.__setattr__(self, "_msvm_inputs", None)
        object.__setattr__(self, "_runner", None)
        object.__setattr__(self, "_guard", None)    # callpath.Guard: set by the call path (callpath.point)
        object.__setattr__(self, "_mixed_precision", None)     # to_float's dtype
        from ..executor import warm_up
        from ..gcpolicy import thaw

        warm_up()       # (once per process: the background compiler starts loading LLVM)
        thaw()          # (what gcpolicy froze goes back to the collector: models are being made)

    def __setattr__(self, name, value):
        d = self.__dict__
        if "_params" not in d:
            # as MindSpore's: a plain value may be set before Cell.__init__ (mindcv's SKNet sets one), a
            # Parameter or a Cell may not (there is nowhere to register it yet)
            if isinstance(value, (Parameter, Cell)):
                raise RuntimeError(f"{type(self).__name__}: call super().__init__() before assigning the "
                                   f"{type(value).__name__} {name!r}")
            object.__setattr__(self, name, value)
            return
        held = d["_params"].get(name)
        if held is not None and isinstance(value, Tensor) and not isinstance(value, Parameter):
            # as MindSpore's Cell: a Tensor assigned to a Parameter's name is that Parameter's new data
            # (mindcv's CaiT initializes its Dense layers so, ``m.weight = initializer(...)``): the Parameter
            # stays registered, read-only and named, so checkpoints fill it and the compiler prepares it
            held.set_data(value)
            return
        if isinstance(d.get(name), ParameterTuple):      # (a ParameterTuple replaced: its items' entries go)
            for key in [k for k in d["_params"] if k.startswith(name + ".")]:
                del d["_params"][key]
        if isinstance(value, Parameter):
            if value.name is None:
                value.name = name
            d["_params"][name] = value
            d["_cells"].pop(name, None)
        elif isinstance(value, ParameterTuple):      # each item the Parameter at path name.<index>
            d["_params"].pop(name, None)
            d["_cells"].pop(name, None)
            for i, p in enumerate(value):
                if p.name is None:
                    p.name = f"{name}.{i}"
                d["_params"][f"{name}.{i}"] = p
        elif isinstance(value, Cell):
            d["_cells"][name] = value
            d["_params"].pop(name, None)
            if d.get("_auto_prefix", True):        # as MindSpore: the child's parameters become 'name.<path>'
                value.update_parameters_name(name + ".")
        else:
            d["_params"].pop(name, None)
            d["_cells"].pop(name, None)
        object.__setattr__(self, name, value)
        if name != "training" and _compiled(self):
            # construct read this Cell's attributes as constants, and its parents' Codes hold them (and
            # its sub-Cells' Codes): every Cell compiles again, as after a Parameter's new shape
            _forget_codes(self)
            self._drop_runner()
            reasons.attribute_set(type(self).__name__, name)
            PARAMETER_SHAPES[0] += 1

    def construct(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define construct()")

    def _drop_runner(self):
        object.__setattr__(self, "_runner", None)
        object.__setattr__(self, "_guard", None)

    # a call: its guard, its runner's memo, replay and interpreter (or construct, in PYNATIVE_MODE)
    __call__ = callpath.cell_call

    def _make_runner(self):
        from ..executor import CellRunner

        runner = CellRunner(self)
        object.__setattr__(self, "_runner", runner)
        return runner

    # --- MindSpore API
    def compile(self, *args, **kwargs):
        """Compile construct for these arguments without running it (MindSpore's Cell.compile)."""
        runner = self.__dict__["_runner"] or self._make_runner()
        vals = args if (not kwargs and len(args) == runner.n) else runner.values(args, kwargs)
        runner.resolve(vals)

    def set_inputs(self, *inputs, **kwargs):
        """Declare the argument shapes (None dims are dynamic). Recompiles on the next call."""
        object.__setattr__(self, "_msvm_inputs", list(inputs))
        self._drop_runner()

    def set_train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for c in self._cells.values():
            c.set_train(mode)
        self._drop_runner()
        return self

    def to_float(self, dst_type):
        """Run this Cell and its sub-Cells in ``dst_type`` (MindSpore's ``to_float``: float16 or
        float32; a later call, also on a sub-Cell, overrides). In GRAPH_MODE each marked Cell's
        float tensor inputs and the float Parameters its construct reads are cast to ``dst_type``
        where it starts (MindSpore's mixed-precision cast), so its ops compute in that type and a
        float16 Cell returns float16; in PYNATIVE_MODE each op's float inputs are cast. msvm has no
        bfloat16: asking for it is msvm's gap."""
        from .. import dtype as dt

        if getattr(dst_type, "name", None) == "bfloat16" or dst_type == "bfloat16":
            from ..compat import MindSporeGap

            raise MindSporeGap("Cell.to_float(mstype.bfloat16)")
        if dst_type not in (dt.float16, dt.float32):
            raise ValueError("For 'to_float', the argument 'dst_type' must be mstype.float32, mstype.float16 or "
                             f"mstype.bfloat16, but got type: {type(dst_type)} and value: {dst_type}.")
        for _, c in self.cells_and_names():
            object.__setattr__(c, "_mixed_precision", dst_type)
            c._drop_runner()
        return self

    def parameters_dict(self, recurse=True) -> dict:
        """``{param.name: param}``, keyed as a checkpoint is (MindSpore's names, see update_parameters_name)."""
        return {p.name: p for p in self.get_parameters(expand=recurse)}

    def parameters_and_names(self, name_prefix="", expand=True):
        """(attribute path, parameter) for each parameter once, this Cell's own first, then its children's."""
        seen = set()
        for name, p in self._walk_parameters(name_prefix, expand):
            if id(p) not in seen:
                seen.add(id(p))
                yield (name, p)

    def _walk_parameters(self, prefix, expand):
        for name, p in self._params.items():
            yield (f"{prefix}{name}", p)
        if expand:
            for cname, c in self._cells.items():
                yield from c._walk_parameters(f"{prefix}{cname}.", True)

    def update_parameters_name(self, prefix="", recurse=True):
        """Name every parameter ``prefix + its attribute path`` (MindSpore does this when a Cell becomes an
        attribute of another: ``layer1.0.conv1.weight``, ``bn1.moving_mean``); checkpoints are keyed on these."""
        for name, p in self.parameters_and_names(expand=recurse):
            p.name = prefix + name

    def get_parameters(self, expand=True):
        for _, p in self.parameters_and_names(expand=expand):
            yield p

    def init_parameters_data(self, auto_parallel_mode=False) -> dict:
        """MindSpore initializes parameters made with a deferred initializer here; msvm's have their data
        when they are made: ``{param: param}`` (mindcv's pnasnet and nasnet call it in __init__)."""
        return {p: p for p in self.get_parameters()}

    def trainable_params(self, recurse=True) -> list:
        return [p for p in self.get_parameters() if p.requires_grad]

    def cells(self):
        return list(self._cells.values())

    def apply(self, fn):
        """MindSpore's Cell.apply: ``fn`` on every sub-Cell (depth first), then on this one; this Cell."""
        for cell in self.cells():
            cell.apply(fn)
        fn(self)
        return self

    def name_cells(self) -> dict:
        return dict(self._cells)

    def cells_and_names(self, cell_name=""):
        yield (cell_name, self)
        for name, c in self._cells.items():
            yield from c.cells_and_names(f"{cell_name}.{name}" if cell_name else name)

    # --- what the frontend asks
    def __msvm_children__(self):
        return list(self._cells.items())

    def __msvm_construct_params__(self):
        from ..frontend.compiler import signature_params

        return signature_params(inspect.signature(self.construct))

    def extend_repr(self):
        return ""

    def __repr__(self):
        inner = ", ".join(f"{k}={type(v).__name__}" for k, v in self._cells.items())
        extra = self.extend_repr()
        return f"{type(self).__name__}<{extra}{', ' if extra and inner else ''}{inner}>"


class CellList(Cell):
    """A list of Cells (indexable, iterable in construct: the loop is unrolled)."""

    def __init__(self, *args, auto_prefix=True, **kwargs):
        super().__init__(auto_prefix=auto_prefix)
        if len(args) == 1 and isinstance(args[0], dict):      # SequentialCell(OrderedDict([("conv", ...), ...]))
            for name, c in args[0].items():
                if not isinstance(c, Cell):
                    raise TypeError(f"CellList holds Cells, got {type(c).__name__} for {name!r}")
                setattr(self, str(name), c)
            return
        cells = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        for c in cells:
            self.append(c)

    def append(self, cell):
        if not isinstance(cell, Cell):
            raise TypeError(f"CellList holds Cells, got {type(cell).__name__}")
        setattr(self, str(len(self._cells)), cell)

    def __getitem__(self, i):
        items = list(self._cells.values())
        if isinstance(i, slice):
            return CellList(items[i], auto_prefix=False)      # a view: its Cells keep their parameters' names
        return items[i]

    def __len__(self):
        return len(self._cells)

    def __iter__(self):
        return iter(list(self._cells.values()))


class SequentialCell(CellList):
    """Cells applied one after another."""

    def construct(self, x):
        for cell in self:
            x = cell(x)
        return x


def _compiled(cell) -> bool:
    """Whether construct of this Cell has been compiled, on its own or as a sub-Cell of another
    (the frontend's per-Cell Code cache holds an entry for it)."""
    if cell.__dict__.get("_runner") is not None:
        return True
    from ..frontend.compiler import _cell_codes

    return bool(_cell_codes.get(cell))


def _forget_codes(cell) -> None:
    from ..frontend.compiler import _cell_codes

    _cell_codes.pop(cell, None)


def _is_tensor(v):
    return isinstance(v, Tensor)
