"""glibc's malloc, set for endpoints whose rounds are multi-MB buffers (issue #25's worker RSS band).

glibc serves a request of at least its mmap threshold with a mapping of its own,
unmapped when freed. The threshold is dynamic by default: freeing such a buffer
raises it to that buffer's size (up to 32 MB), and from then on a dense round's
buffers (at V = 129280: 0.5 MB a REPLY and a counts row, 5 MB of FP64 weights)
come from the heap arenas, which keep them, freed and fragmented, as resident
memory. Over 10^4 dense rounds with faults the worker's RSS held a band about
80 MB above its warm-up value that way (bench/RESULTS.md, "Soak"). Pinned at
:data:`LARGE_BUFFER`, every large buffer leaves RSS when freed, so RSS follows
what the endpoint holds, which is what the soak's memory rule measures
(docs/endpoint.md, "The bound").
"""

from __future__ import annotations

import ctypes

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
#: bytes: a buffer this large or larger is mapped on its own and unmapped when freed (a sparse round's are smaller)
LARGE_BUFFER = 256 * 1024


def return_large_buffers() -> bool:
    """Pin glibc's mmap threshold at :data:`LARGE_BUFFER` for this process (no dynamic raise).
    False where the C library has no ``mallopt`` or refuses it (not glibc): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER))
