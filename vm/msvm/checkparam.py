"""``mindspore._checkparam`` (imported as ``validator`` by primitives defined in user code):
the checks MindSpore's primitive constructors call, each returning the checked value."""

from __future__ import annotations


def check_value_type(arg_name, arg_value, valid_types, prim_name=None):
    types = tuple(valid_types) if isinstance(valid_types, (list, tuple)) else (valid_types,)
    if isinstance(arg_value, bool) and bool not in types or not isinstance(arg_value, types):
        names = ", ".join(getattr(t, "__name__", str(t)) for t in types)
        raise TypeError(f"For '{prim_name}', the type of '{arg_name}' must be one of [{names}], "
                        f"but got {type(arg_value).__name__}")
    return arg_value


def check_int(arg_value, value=0, rel=None, arg_name="", prim_name=None):
    if not isinstance(arg_value, int) or isinstance(arg_value, bool):
        raise TypeError(f"For '{prim_name}', '{arg_name}' must be an int, but got {arg_value!r}")
    return arg_value


def _passes(*args, **kwargs):
    """A type check on dtypes msvm's kernels check again when they run."""
    return args[0] if args else None


check_scalar_or_tensor_types_same = check_tensors_dtypes_same_and_valid = check_tensor_dtype_valid = _passes
check_type_name = check_subclass = check_types_same_and_valid = _passes


def check_bool(arg_value, arg_name=None, prim_name=None):
    if not isinstance(arg_value, bool):
        raise TypeError(f"For '{prim_name}', '{arg_name}' must be a bool, but got {arg_value!r}")
    return arg_value


def check_positive_int(arg_value, arg_name=None, prim_name=None):
    if not isinstance(arg_value, int) or isinstance(arg_value, bool) or arg_value <= 0:
        raise ValueError(f"For '{prim_name}', '{arg_name}' must be a positive int, but got {arg_value!r}")
    return arg_value
