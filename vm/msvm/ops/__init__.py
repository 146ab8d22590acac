"""``msvm.ops``: MindSpore-style functions and primitives (see functional.py)."""

from .functional import *  # noqa: F403
from .functional import __dict__ as _fd
from .primitives import *  # noqa: F403
from .primitives import Primitive  # noqa: F401 - re-exported
from .random_ops import (  # noqa: F401 - the function faces of the random ops (issue 21)
    choice_with_mask,
    dropout,
    dropout2d,
    dropout3d,
    log_uniform_candidate_sampler,
    multinomial,
    multinomial_with_replacement,
    random_categorical,
    random_gamma,
    random_poisson,
    shuffle,
    standard_laplace,
    standard_normal,
    uniform,
    uniform_candidate_sampler,
)
from .registry import functions as _functions
from .registry import install_methods as _install_methods

globals().update(_functions())
from ..tensor import TensorMethods as _TM  # noqa: E402
from ..tensor import _install_graph_methods  # noqa: E402

_install_methods(_TM)
_install_graph_methods()        # (graph values get a copy of TensorMethods' methods)

max = _fd["amax"]  # noqa: A001
min = _fd["amin"]  # noqa: A001
sum = _fd["sum"]  # noqa: A001
abs = _fd["abs"]  # noqa: A001
pow = _fd["pow"]  # noqa: A001

__all__ = [n for n in list(_fd) + list(globals()) if not n.startswith("_") and n not in ("annotations", "F")]
