"""The names of the all-reduce algorithms: the one list the other modules derive from.

* ``ring``: the pipelined ring, bandwidth-optimal for large buffers (ring.py);
* ``recursive_doubling``: log2(N) whole-buffer exchanges, for small buffers
  (recursive_doubling.py);
* ``hierarchical``: node-aware, shared memory inside a node and a flat
  algorithm between nodes (hierarchical.py).

Which one runs for a buffer size is decided in choice.py. The subsets below
are views of this list, not lists of their own: `allreduce` accepts the names
plus "auto", a rules file may name any of them (tuning.py), and the cost
model prices the flat ones (costmodel.py).
"""

ALGORITHMS = ("ring", "recursive_doubling", "hierarchical")

FLAT_ALGORITHMS = tuple(name for name in ALGORITHMS if name != "hierarchical")
"""The algorithms that send messages between all ranks alike, with no notion of nodes."""
