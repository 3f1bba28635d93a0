"""Mutation adequacy of the golden corpus: which small changes to the spec would the vectors notice?

``qconform adequacy`` (docs/adequacy.md) mutates one spec module at a time
(:mod:`.mutate`), re-solves in memory every committed case of the families that
import it (:mod:`.oracle`, :mod:`.imports`), each mutant in its own forked worker
process with a timeout (:mod:`.runner`), and classifies it: killed by drift
(naming the first drifted case), by a crash, by a timeout, equivalent (listed with
a reason in ``spec/equivalent_mutants.toml``, :mod:`.equivalents`), or survived.
"""
