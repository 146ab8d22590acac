"""L1: the reference interpreter on numpy (handler table, buffers, trace hook)."""

from .interpreter import BoundCode, Frame, get_trace, run, set_trace

__all__ = ["BoundCode", "Frame", "get_trace", "run", "set_trace"]
