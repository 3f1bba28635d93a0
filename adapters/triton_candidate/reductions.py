"""The combine functions of the candidate's reductions and prefix sums.

Kernels call ``tl.reduce(x, axis, ADD)`` and ``tl.associative_scan(x, axis, ADD)``
(likewise ``MAX``, ``MIN``) with Triton's own combine functions. ``tl.sum``,
``tl.max``, ``tl.min`` and ``tl.cumsum`` are ``@jit`` wrappers around exactly these
calls (after widening narrow types, which the kernels do themselves), so natively
the code is the same; in the interpreter the direct call skips a nested function
call that re-patches ``triton.language`` each time (milliseconds per call, the
largest cost of a CPU run). The interpreter recognizes these combine functions and
reduces with numpy.
"""

from triton.language.standard import _elementwise_max as MAX
from triton.language.standard import _elementwise_min as MIN
from triton.language.standard import _sum_combine as ADD

__all__ = ["ADD", "MAX", "MIN"]
