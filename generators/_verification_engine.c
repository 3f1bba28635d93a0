/* The exact engine of the verification_round accumulated stream in C, and its
 * RNG floor in the same technology (docs/accumulated.md, "Engine").
 *
 * Hand-written, because the NumPy engine (accumulated_engine.verification_records_numpy, the
 * fallback when this module is not built) runs tens of array operations over rows of 8 tokens and
 * 5 drafts per stage, and stays near a tenth of a vectorized Philox however it is arranged
 * (bench/RESULTS.md, issue #24). The rules, their bounds and the passes over a chunk of cases are
 * in verification_engine.h, shared with the input stream's fused path (_accumulated_stream.c). Its
 * records equal the NumPy engine's and the spec's (tests/generators/test_verification_engine_native.py,
 * tests/generators/test_accumulated.py); it makes expected hashes, and candidates never import it.
 *
 * verification_records(seed, generation, round, anchor, depth, q, p, drafts, out):
 *   seed, generation, round, anchor: uint64 [n] (the seed's two words are the Philox key);
 *   depth: int64 [n], 1 .. KMAX; drafts: int64 [n, KMAX], tokens below VMAX;
 *   q: uint64 [n, KMAX, VMAX]; p: uint64 [n, KMAX + 1, VMAX] (any strides: views of the stream);
 *   out: a writable C-contiguous uint32 [n, VERIFY_WORDS] buffer, written whole.
 * philox_floor(count, out[, form]): a plain Philox4x32-10 over counters (i mod 2^32, i >> 32, 0, 4)
 *   under the stream key, four uint32 words per block into out (uint32 [count, 4]): the floor the
 *   engine's rate is measured against, compiled with the same flags (bench/bench_accumulated.py). Form 2,
 *   the goal's floor: vectorized in registers (philox_x4, four lanes held in registers through the ten rounds:
 *   the kernel of the engine's own draws; as fast as form 0 over these counters: docs/accumulated.md, "In C,
 *   `verification_round`"). Form 0, the default: vectorized in lanes (philox_lanes over 256 lanes at a time;
 *   the goal's floor before 2026-12-04, kept to compare). Form 1: scalar, one block after the other (the floor
 *   before that; bench/RESULTS.md, issue #24).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native_module.h"
#include "philox4x32.h"
#include "verification_engine.h"

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

static PyObject *verification_records(PyObject *self, PyObject *args) {
    static const char *names[] = {"seed", "generation", "round", "anchor", "depth", "q", "p", "drafts"};
    static const int ndims[] = {1, 1, 1, 1, 1, 3, 3, 2};
    PyObject *objects[8], *out_object;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4],
                          &objects[5], &objects[6], &objects[7], &out_object))
        return NULL;
    Py_buffer buffers[8], out;
    int held = 0, ok = 0;
    View views[E_INPUTS];
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
    for (Py_ssize_t lo = 0; lo < n; lo += ENGINE_CHUNK)
        verify_chunk(lo, lo + ENGINE_CHUNK < n ? lo + ENGINE_CHUNK : n, views, (uint32_t *)out.buf + lo * VERIFY_WORDS);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&out);
    ok = 1;
done:
    while (held > 0) PyBuffer_Release(&buffers[--held]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

#define FLOOR_LANES 256 /* blocks of one pass of the vectorized floor */

/* Blocks lo .. lo + n - 1 of the floor (n <= FLOOR_LANES), words at out[4 (i - lo)]: philox_lanes, the
 * vectorized kernel (the stream's and, with a key a lane, the engine's draws). */
static void floor_lanes(Py_ssize_t lo, int n, uint32_t *out) {
    uint32_t c0[FLOOR_LANES], c1[FLOOR_LANES], c2[FLOOR_LANES], c3[FLOOR_LANES];
    for (int l = 0; l < n; l++) {
        c0[l] = (uint32_t)(lo + l);
        c1[l] = (uint32_t)((uint64_t)(lo + l) >> 32);
        c2[l] = 0;
        c3[l] = 4;
    }
    philox_lanes(c0, c1, c2, c3, n, STREAM_KEY0, STREAM_KEY1);
    for (int l = 0; l < n; l++) {
        out[4 * l] = c0[l];
        out[4 * l + 1] = c1[l];
        out[4 * l + 2] = c2[l];
        out[4 * l + 3] = c3[l];
    }
}

/* Blocks lo .. lo + n - 1 of the floor in registers (n a multiple of 4), words at out[4 (i - lo)]: philox_x4,
 * four blocks at a time, the four words of each written out after a transpose: the goal's floor, in the form of
 * the engine's own draws. Where there is no SSE2, floor_lanes. */
static void floor_registers(Py_ssize_t lo, int n, uint32_t *out) {
#if PHILOX_SIMD
    const __m128i key0 = _mm_set1_epi32((int)STREAM_KEY0), key1 = _mm_set1_epi32((int)STREAM_KEY1);
    for (int l = 0; l < n; l += 4) {
        uint64_t i = (uint64_t)(lo + l);
        __m128i x[4] = {_mm_add_epi32(_mm_set1_epi32((int)(uint32_t)i), _mm_set_epi32(3, 2, 1, 0)), _mm_setzero_si128(),
                        _mm_setzero_si128(), _mm_set1_epi32(4)};
        if ((uint32_t)i > 0xFFFFFFFCu) /* the four counters cross 2^32: each lane's word 1 of its own */
            x[1] = _mm_set_epi32((int)((i + 3) >> 32), (int)((i + 2) >> 32), (int)((i + 1) >> 32), (int)(i >> 32));
        else
            x[1] = _mm_set1_epi32((int)(i >> 32));
        philox_x4(x, key0, key1, 0);
        __m128i t0 = _mm_unpacklo_epi32(x[0], x[1]), t1 = _mm_unpacklo_epi32(x[2], x[3]);
        __m128i t2 = _mm_unpackhi_epi32(x[0], x[1]), t3 = _mm_unpackhi_epi32(x[2], x[3]);
        _mm_storeu_si128((__m128i *)(out + 4 * l), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128((__m128i *)(out + 4 * l + 4), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128((__m128i *)(out + 4 * l + 8), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128((__m128i *)(out + 4 * l + 12), _mm_unpackhi_epi64(t2, t3));
    }
#else
    floor_lanes(lo, n, out);
#endif
}

enum { FLOOR_LANES_FORM, FLOOR_SCALAR, FLOOR_REGISTERS }; /* philox_floor's forms */

static PyObject *philox_floor(PyObject *self, PyObject *args) {
    Py_ssize_t count;
    Py_buffer out;
    int form = FLOOR_LANES_FORM;
    if (!PyArg_ParseTuple(args, "nw*|i", &count, &out, &form)) return NULL;
    if (form < FLOOR_LANES_FORM || form > FLOOR_REGISTERS) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "form: 0 (vectorized), 1 (scalar) or 2 (in registers)");
        return NULL;
    }
    if (count < 0 || out.len < count * 16) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out: expected count * 4 uint32 words");
        return NULL;
    }
    uint32_t *words = (uint32_t *)out.buf;
    Py_BEGIN_ALLOW_THREADS;
    if (form == FLOOR_SCALAR) {
        for (Py_ssize_t i = 0; i < count; i++) {
            uint32_t x[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 4};
            philox(x, STREAM_KEY0, STREAM_KEY1);
            memcpy(words + 4 * i, x, 16);
        }
    } else if (form == FLOOR_REGISTERS) {
        Py_ssize_t whole = count / 4 * 4; /* the last count mod 4 blocks by floor_lanes */
        for (Py_ssize_t lo = 0; lo < whole; lo += FLOOR_LANES)
            floor_registers(lo, whole - lo < FLOOR_LANES ? (int)(whole - lo) : FLOOR_LANES, words + 4 * lo);
        if (whole < count) floor_lanes(whole, (int)(count - whole), words + 4 * whole);
    } else {
        for (Py_ssize_t lo = 0; lo < count; lo += FLOOR_LANES)
            floor_lanes(lo, count - lo < FLOOR_LANES ? (int)(count - lo) : FLOOR_LANES, words + 4 * lo);
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"verification_records", verification_records, METH_VARARGS,
     "verification_records(seed, generation, round, anchor, depth, q, p, drafts, out): the records into out."},
    {"philox_floor", philox_floor, METH_VARARGS,
     "philox_floor(count, out[, form]): Philox4x32-10 over count counters under the stream key, into out "
     "(form 0: vectorized lanes; 1: one block after the other; 2: four lanes in registers, the goal's floor)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_verification_engine",
    "The verification_round engine in C and its Philox floor (accumulated_engine.py).", -1, methods,
};

/* the module, with the digest of its sources (qconform/native_module.h) */
PyMODINIT_FUNC PyInit__verification_engine(void) { return native_module_create(&module); }
