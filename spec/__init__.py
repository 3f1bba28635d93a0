"""qconform.spec: the executable spec of the q transport design, in exact arithmetic.

No floats are used for any normative result. Floats that enter (FP32/FP64 weights,
logits, temperatures) are first converted to their exact dyadic rational values.
Each function cites, with :func:`qconform.spec.rules.defines`, the rules it defines.
"""

SPEC_VERSION = "1"
