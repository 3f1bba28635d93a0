/* The exact engine of the verification_round accumulated stream in C, and its
 * RNG floor in the same technology (docs/accumulated.md, "Engine").
 *
 * Hand-written, because the NumPy engine (accumulated_engine.verification_records_numpy, the
 * fallback when this module is not built) runs tens of array operations over rows of 8 tokens and
 * 5 drafts per stage, and stays near a tenth of a vectorized Philox however it is arranged
 * (bench/RESULTS.md, issue #24). Here the cases go in chunks, in four passes: every acceptance
 * draw below K, the acceptance tests, the final draw, then the pick and the record, written once.
 * Its records equal the NumPy engine's and the spec's (tests/generators/test_accumulated.py); it makes
 * expected hashes, and candidates never import it.
 *
 * Every quantity is an exact unsigned integer (no floats), with these bounds (the stream's inputs,
 * accumulated.verification_arrays): the key, counter and draw words are below 2^32; the counts q
 * and p are dyadic24 counts, at most M = 2^24, and a row sums to M, so a residual's total and
 * every cumulative count C_v are at most 2^24. Hence u32 * q(x) < 2^56, p(x) * 2^32 <= 2^56,
 * u32 * R < 2^56 and C_v * 2^32 <= 2^56: every product fits in uint64 with room to spare.
 *
 * verification_records(seed, generation, round, anchor, depth, q, p, drafts, out):
 *   seed, generation, round, anchor: uint64 [n] (the seed's two words are the Philox key);
 *   depth: int64 [n], 1 .. KMAX; drafts: int64 [n, KMAX], tokens below VMAX;
 *   q: uint64 [n, KMAX, VMAX]; p: uint64 [n, KMAX + 1, VMAX] (any strides: views of the stream);
 *   out: a writable C-contiguous uint32 [n, VERIFY_WORDS] buffer, written whole.
 * philox_floor(count, out): a plain Philox4x32-10 over counters (i mod 2^32, i >> 32, 0, 4) under
 *   the stream key, four uint32 words per block into out (uint32 [count, 4]): the floor the
 *   engine's rate is measured against, compiled with the same flags (bench/bench_accumulated.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "philox4x32.h"

#define VERIFY_WORDS (3 + (KMAX + 1) + 5 * (KMAX + 1))
#define PAD 0xFFFFFFFFu
#define D_ACCEPT 0u   /* decision codes of a record */
#define D_REJECT 1u
#define D_CORRECTION 2u
#define D_BONUS 3u

/* Word 0 of the RNG ABI draw at (position, round, generation, domain << 24) under the seed. */
static inline uint32_t draw(uint32_t position, uint32_t rnd, uint32_t generation, uint32_t domain, uint32_t k0,
                            uint32_t k1) {
    uint32_t x[4] = {position, rnd, generation, domain << 24};
    philox(x, k0, k1);
    return x[0];
}

/* A strided view: element [i, j, v] at base + i * s[0] + j * s[1] + v * s[2] (bytes). */
typedef struct {
    const char *base;
    Py_ssize_t s[3];
} View;

#define AT(view, T, i, j, v) (*(const T *)((view).base + (i) * (view).s[0] + (j) * (view).s[1] + (v) * (view).s[2]))

static int view_of(Py_buffer *b, int ndim, const Py_ssize_t *shape, const char *name, View *v) {
    if (b->itemsize != 8 || b->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d-dimensional 8-byte integers", name, ndim);
        return -1;
    }
    for (int d = 0; d < ndim; d++) {
        if (b->shape[d] != shape[d]) {
            PyErr_Format(PyExc_ValueError, "%s: dimension %d is %zd, not %zd", name, d, b->shape[d], shape[d]);
            return -1;
        }
    }
    v->base = (const char *)b->buf;
    for (int d = 0; d < 3; d++) v->s[d] = d < ndim ? b->strides[d] : 0;
    return 0;
}

/* Cases go in chunks of CHUNK, in four passes, so that the Philox blocks of different cases overlap in
 * the pipeline (a block is a chain of ten dependent multiplications; one case's draws alone would
 * wait on each other and on its branches) and the decisions take no data-dependent branch. */
#define CHUNK 256

typedef struct {
    uint32_t k0, k1, generation, rnd, anchor;
    int depth, accepted;
    uint32_t u32[KMAX + 1]; /* the acceptance draws below K, then the final draw */
} Case;

static void chunk(Py_ssize_t lo, Py_ssize_t hi, const View *f, uint32_t *records) {
    Case cases[CHUNK];
    const View q = f[5], p = f[6], drafts = f[7];
    /* 1. every acceptance draw below K (the round consumes those up to its first rejection) */
    for (Py_ssize_t i = lo; i < hi; i++) {
        Case *c = &cases[i - lo];
        uint64_t seed = AT(f[0], uint64_t, i, 0, 0);
        c->k0 = (uint32_t)seed;
        c->k1 = (uint32_t)(seed >> 32);
        c->generation = (uint32_t)AT(f[1], uint64_t, i, 0, 0);
        c->rnd = (uint32_t)AT(f[2], uint64_t, i, 0, 0);
        c->anchor = (uint32_t)AT(f[3], uint64_t, i, 0, 0);
        c->depth = (int)AT(f[4], int64_t, i, 0, 0);
        /* the case's rows, read by passes 2 and 4: fetched now, while the draws compute (the rows of
           consecutive cases are hundreds of bytes apart, which the hardware prefetchers do not follow) */
        for (int k = 0; k <= c->depth; k++) {
            if (k < c->depth) __builtin_prefetch(&AT(q, uint64_t, i, k, 0));
            __builtin_prefetch(&AT(p, uint64_t, i, k, 0));
        }
        __builtin_prefetch(&AT(drafts, int64_t, i, 0, 0));
        for (int k = 0; k < c->depth; k++)
            c->u32[k] = draw(c->anchor + (uint32_t)k, c->rnd, c->generation, ACCEPT, c->k0, c->k1);
    }
    /* 2. the acceptance tests: accept iff u32 q(x) < p(x) 2^32 (both below 2^57); accepted is the first
       rejection, or K after K accepts: the lowest set bit of (rejections | 2^K) */
    for (Py_ssize_t i = lo; i < hi; i++) {
        Case *c = &cases[i - lo];
        unsigned rejected = 1u << c->depth;
        for (int k = 0; k < c->depth; k++) {
            int64_t x = AT(drafts, int64_t, i, k, 0);
            rejected |= (unsigned)((uint64_t)c->u32[k] * AT(q, uint64_t, i, k, x) >= AT(p, uint64_t, i, k, x) << 32)
                        << k;
        }
        c->accepted = __builtin_ctz(rejected);
    }
    /* 3. the final draw at anchor + accepted (mod 2^32) */
    for (Py_ssize_t i = lo; i < hi; i++) {
        Case *c = &cases[i - lo];
        c->u32[KMAX] = draw(c->anchor + (uint32_t)c->accepted, c->rnd, c->generation, CORRECTION, c->k0, c->k1);
    }
    /* 4. the pick and the record (accumulated.verification_record's layout) */
    for (Py_ssize_t i = lo; i < hi; i++) {
        const Case *c = &cases[i - lo];
        uint32_t *rec = records + (i - lo) * VERIFY_WORDS, *emitted = rec + 2, *draws = rec + 4 + KMAX;
        int accepted = c->accepted, full = accepted == c->depth, tested = full ? accepted : accepted + 1;
        /* from the bonus row p_{K+1} after K accepts, else the residual max(p - q, 0) at the rejection: the
           first v with C_v 2^32 > u32 R (C_v, R at most 2^24), token 0 if none. C is nondecreasing, so the
           first such v is the number of v with C_v 2^32 <= u32 R */
        uint64_t cumulative[VMAX], total = 0;
        for (int v = 0; v < VMAX; v++) {
            uint64_t pv = AT(p, uint64_t, i, accepted, v);
            uint64_t qv = full ? 0 : AT(q, uint64_t, i, accepted, v);
            total += pv > qv ? pv - qv : 0;
            cumulative[v] = total;
        }
        uint64_t threshold = (uint64_t)c->u32[KMAX] * total;
        uint32_t below = 0;
        for (int v = 0; v < VMAX; v++) below += (cumulative[v] << 32) <= threshold;
        uint32_t token = below < VMAX ? below : 0;
        rec[0] = (uint32_t)accepted;
        rec[1] = (uint32_t)accepted + 1;
        for (int k = 0; k < KMAX + 1; k++)
            emitted[k] = k < accepted ? (uint32_t)AT(drafts, int64_t, i, k, 0) : k == accepted ? token : PAD;
        rec[3 + KMAX] = (uint32_t)tested + 1;
        for (int k = 0; k < tested; k++) {
            uint32_t *d = draws + 5 * k;
            d[0] = ACCEPT;
            d[1] = c->anchor + (uint32_t)k;
            d[2] = c->u32[k];
            d[3] = k < accepted ? D_ACCEPT : D_REJECT;
            d[4] = (uint32_t)AT(drafts, int64_t, i, k, 0);
        }
        uint32_t *d = draws + 5 * tested;
        d[0] = CORRECTION;
        d[1] = c->anchor + (uint32_t)accepted;
        d[2] = c->u32[KMAX];
        d[3] = full ? D_BONUS : D_CORRECTION;
        d[4] = token;
        for (uint32_t *w = d + 5; w < rec + VERIFY_WORDS; w++) *w = PAD;
    }
}

static PyObject *verification_records(PyObject *self, PyObject *args) {
    static const char *names[] = {"seed", "generation", "round", "anchor", "depth", "q", "p", "drafts"};
    static const int ndims[] = {1, 1, 1, 1, 1, 3, 3, 2};
    PyObject *objects[8], *out_object;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &out_object))
        return NULL;
    Py_buffer buffers[8], out;
    int held = 0, ok = 0;
    View views[8];
    memset(&out, 0, sizeof out);
    for (; held < 8; held++)
        if (PyObject_GetBuffer(objects[held], &buffers[held], PyBUF_RECORDS_RO) < 0) goto done;
    Py_ssize_t n = buffers[0].ndim == 1 ? buffers[0].shape[0] : -1;
    for (int k = 0; k < 8; k++) {
        Py_ssize_t shape[3] = {n, k == 6 ? KMAX + 1 : KMAX, VMAX};
        if (view_of(&buffers[k], ndims[k], shape, names[k], &views[k]) < 0) goto done;
    }
    /* every row index below is in bounds: a depth in 1 .. KMAX, drafts below VMAX (the stream's are) */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t depth = AT(views[4], int64_t, i, 0, 0);
        int bad = depth < 1 || depth > KMAX;
        for (int k = 0; !bad && k < depth; k++) bad = (uint64_t)AT(views[7], int64_t, i, k, 0) >= VMAX;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "case %zd: a depth outside 1..%d or a draft outside 0..%d", i, KMAX, VMAX - 1);
            goto done;
        }
    }
    if (PyObject_GetBuffer(out_object, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
    if (out.len != n * VERIFY_WORDS * 4) {
        PyErr_SetString(PyExc_ValueError, "out: expected n * VERIFY_WORDS uint32 words");
        PyBuffer_Release(&out);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK)
        chunk(lo, lo + CHUNK < n ? lo + CHUNK : n, views, (uint32_t *)out.buf + lo * VERIFY_WORDS);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&out);
    ok = 1;
done:
    while (held > 0) PyBuffer_Release(&buffers[--held]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyObject *philox_floor(PyObject *self, PyObject *args) {
    Py_ssize_t count;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "nw*", &count, &out)) return NULL;
    if (count < 0 || out.len < count * 16) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out: expected count * 4 uint32 words");
        return NULL;
    }
    uint32_t *words = (uint32_t *)out.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t x[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 4};
        philox(x, STREAM_KEY0, STREAM_KEY1);
        memcpy(words + 4 * i, x, 16);
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"verification_records", verification_records, METH_VARARGS,
     "verification_records(seed, generation, round, anchor, depth, q, p, drafts, out): the records into out."},
    {"philox_floor", philox_floor, METH_VARARGS,
     "philox_floor(count, out): Philox4x32-10 over count counters under the stream key, into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_verification_engine",
    "The verification_round engine in C and its Philox floor (accumulated_engine.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__verification_engine(void) { return PyModule_Create(&module); }
