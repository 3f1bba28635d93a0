"""The reference admission policy: a depth fixed before sampling (R35). It passes every audit.

qconform audit-policy examples/policies/fixed_depth.py:policy --depth 2
"""

from qconform.spec.admission import fixed_depth

#: Admit positions 1 and 2 of every round, read nothing.
policy = fixed_depth(2)
