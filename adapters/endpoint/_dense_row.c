/* One pass over a dense REPLY tail: the q checks of docs/wire-v2.md ("q validation") and the counts.
 *
 * Hand-written, because no library does this check in one pass: NumPy needs one pass per value
 * class plus the conversions (validation.py, the fallback when this module is not built), and a
 * general array library has no operation for "every FP32 value lies on the 2^-24 grid, with its
 * count, the classes present and the total, in one read of the row". Each value is read once: its
 * class is folded into a few flags, its count q * 2^24 is written as an int32 (at most M = 2^24)
 * and added to the total. The flags then decide the reason in the order of validation.py (and of
 * docs/wire-v2.md): padding, then non-finite, then negative, then non-dyadic values anywhere in
 * the row, then a count alone above M, then the total. The caller (validation.Validator) maps the
 * code to the reason; tests/adapters/endpoint/test_endpoint_native.py holds it to the NumPy path on every wire
 * vector and the fuzz inputs. The endpoint never imports the spec, and this module neither.
 *
 * dense_row(tail, vocab, out) -> (code, total), by the fastest build the CPU runs (``build`` names it);
 * dense_row_baseline(tail, vocab, out), the same by the baseline build:
 *   tail:  the row's bytes, stride x FP32 little-endian (any buffer, any alignment);
 *   vocab: the q values, the rest is padding that must be all-zero bytes;
 *   out:   a writable buffer of at least min(vocab, stride) int32: the counts (meaningful when
 *          code is 0);
 *   code:  0 well formed, 1 nonzero padding, 2 a non-finite value, 3 a negative value (-0.0
 *          included), 4 a value off the 2^-24 grid, 5 a count above M, 6 a total other than M;
 *   total: the sum of the counts (meaningful for codes 0 and 6).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native_module.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the wire is little-endian; on another host the NumPy path runs instead"
#endif

#define ONE_BITS 0x3F800000u       /* 1.0: every pattern at most this is a finite value in [0, 1] */
#define EXPONENT_BITS 0x7F800000u  /* an all-ones exponent: infinity or NaN */
#define M_COUNT 16777216.0f        /* M = 2^24 */

static int classify(const unsigned char *row, Py_ssize_t vocab, int nondyadic) {
    /* A row holding a pattern above 1.0: which class comes first (the refusal path only). */
    int nonfinite = 0, negative = 0;
    for (Py_ssize_t i = 0; i < vocab; i++) {
        uint32_t bits;
        memcpy(&bits, row + 4 * i, 4);
        int special = (bits & EXPONENT_BITS) == EXPONENT_BITS;
        nonfinite |= special;
        negative |= (int)(bits >> 31) & !special;
    }
    if (nonfinite) return 2;
    if (negative) return 3;
    if (nondyadic) return 4;
    return 5; /* finite, nonnegative, above 1.0: its count alone exceeds M */
}

/* The pass itself, inlined into each build below. */
static inline __attribute__((always_inline)) int check_row(const unsigned char *row, Py_ssize_t vocab,
                                                           Py_ssize_t stride, int32_t *counts,
                                                           long long *out_total) {
    int code = 0;
    long long total = 0;
    unsigned char padding = 0;
    for (Py_ssize_t i = 4 * vocab; i < 4 * stride; i++) padding |= row[i];
    if (padding) {
        code = 1;
    } else {
        /* blocks of 128 values: their counts (each at most 2^24) sum in 32 bits, so the loop
         * vectorizes (SSE2 has no 64-bit lane sums or unsigned maxima; the flags are masks) */
        int32_t above = 0, offgrid = 0;
        uint64_t sum = 0;
        for (Py_ssize_t base = 0; base < vocab; base += 128) {
            Py_ssize_t end = base + 128 < vocab ? base + 128 : vocab;
            uint32_t block = 0;
            for (Py_ssize_t i = base; i < end; i++) {
                uint32_t bits;
                memcpy(&bits, row + 4 * i, 4);
                uint32_t outside = bits > ONE_BITS;
                above |= (int32_t)outside;
                /* a pattern above 1.0 is counted as 0 here and classified below (a mask, not a
                 * branch: the loop has no control flow, so it vectorizes) */
                uint32_t inside = bits & (outside - 1u);
                float value, back;
                memcpy(&value, &inside, 4);
                float scaled = value * M_COUNT;  /* exact: a power-of-two scaling, at most M */
                int32_t count = (int32_t)scaled; /* truncation, exact on integers */
                back = (float)count;
                uint32_t scaled_bits, back_bits;
                memcpy(&scaled_bits, &scaled, 4);
                memcpy(&back_bits, &back, 4);
                offgrid |= (int32_t)(scaled_bits ^ back_bits); /* nonzero unless the count is exact */
                counts[i] = count;
                block += (uint32_t)count;
            }
            sum += block;
        }
        if (above) {
            code = classify(row, vocab, offgrid);
        } else if (offgrid) {
            code = 4;
        } else if (sum != (uint64_t)(1u << 24)) {
            code = 6;
        }
        total = (long long)sum;
    }
    *out_total = total;
    return code;
}

/* The baseline build (four SSE2 lanes on x86-64), and on x86-64 with GCC or clang the same source
 * built for AVX2 (eight lanes), run where the CPU has it (checked once, at import): the same
 * integers out. ``dense_row_baseline`` runs the baseline build anywhere, so the tests hold both to
 * the NumPy path. */
static int check_row_baseline(const unsigned char *row, Py_ssize_t vocab, Py_ssize_t stride, int32_t *counts,
                              long long *total) {
    return check_row(row, vocab, stride, counts, total);
}

typedef int (*check_fn)(const unsigned char *, Py_ssize_t, Py_ssize_t, int32_t *, long long *);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_BUILD 1
__attribute__((target("avx2"))) static int check_row_avx2(const unsigned char *row, Py_ssize_t vocab,
                                                          Py_ssize_t stride, int32_t *counts, long long *total) {
    return check_row(row, vocab, stride, counts, total);
}
#endif

static check_fn best_check = check_row_baseline;
static const char *best_name = "baseline";

static PyObject *run(PyObject *args, check_fn check) {
    Py_buffer tail, out;
    Py_ssize_t vocab;
    if (!PyArg_ParseTuple(args, "y*nw*", &tail, &vocab, &out)) return NULL;
    Py_ssize_t stride = tail.len / 4;
    if (vocab < 0) vocab = 0;
    if (vocab > stride) vocab = stride;
    if (out.len < 4 * vocab) {
        PyBuffer_Release(&tail);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "the counts buffer is shorter than the row");
        return NULL;
    }
    const unsigned char *row = (const unsigned char *)tail.buf;
    int32_t *counts = (int32_t *)out.buf;
    int code;
    long long total = 0;
    Py_BEGIN_ALLOW_THREADS
    code = check(row, vocab, stride, counts, &total);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&tail);
    PyBuffer_Release(&out);
    return Py_BuildValue("(iL)", code, total);
}

static PyObject *dense_row(PyObject *self, PyObject *args) { return run(args, best_check); }

static PyObject *dense_row_baseline(PyObject *self, PyObject *args) { return run(args, check_row_baseline); }

static PyMethodDef methods[] = {
    {"dense_row", dense_row, METH_VARARGS,
     "dense_row(tail, vocab, out) -> (code, total): the q checks of a dense row and its int32 counts, "
     "in one pass (see the module source)."},
    {"dense_row_baseline", dense_row_baseline, METH_VARARGS,
     "dense_row_baseline(tail, vocab, out): dense_row by the baseline build, whatever the CPU (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dense_row", "One native pass over a dense q row (validation.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__dense_row(void) {
#ifdef HAVE_AVX2_BUILD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        best_check = check_row_avx2;
        best_name = "avx2";
    }
#endif
    PyObject *m = native_module_create(&module); /* with the digest of its sources (qconform/native_module.h) */
    if (m != NULL && PyModule_AddStringConstant(m, "build", best_name) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
