/* The verification_round input stream of the accumulated vectors, one case at a time in C.
 *
 * docs/accumulated.md ("The input stream", "verification_round") defines case i from Philox4x32-10
 * blocks; generators/accumulated.py computes the same cases with NumPy (``verification_arrays_numpy``,
 * the fallback when this module is not built, and the definition the tests hold this module to:
 * tests/generators/test_accumulated_native.py compares every field and every block array bit for
 * bit). Hand-written because the NumPy path costs tens of array operations over short rows (eight
 * tokens, eleven rows a case), about 4.6 us a case, where a case is 18 Philox blocks and a few
 * hundred integer operations: the harness feeds a candidate at 10^6 cases a second only if making
 * the inputs costs a fraction of a microsecond (issue #24).
 *
 * verification_cases(first, fields..., block...) fills, for cases first .. first + n - 1 (n from
 * the length of the first buffer), the arrays of ``verification_arrays_numpy``'s Batch and of
 * ``verification_block`` in one pass, each a writable C-contiguous buffer of exactly its size:
 *   fields: seed, generation, round, anchor (u64 [n]); depth, vocab (i64 [n]); drafts (i64 [n, 5]);
 *           q (u64 [n, 5, 8]); p (u64 [n, 6, 8]): every row as the NumPy path makes it, the rows a
 *           case does not read included;
 *   block:  generation, round, anchor, depth, vocab (u32 [n]); drafts (u32 [n, 5]); q (u32 [n, 5, 8]);
 *           p (f32 [n, 6, 8], count / M): drafts and q rows from K on and p rows from K + 1 on zero
 *           (the block's seed is the fields' seed array itself).
 *   records (optional, u32 [n, VERIFY_WORDS]): the fused path: the engine's records of the cases
 *           (verification_engine.h), each group of FUSED_CASES cases verified right after it is made,
 *           while its rows are in cache, instead of in a second pass over the block's arrays.
 * The arithmetic is exact integer arithmetic in 32 and 64 bits, as the NumPy path's (counts are at
 * most M = 2^24, a draw is below 2^32, so u32 * count fits in 64 bits); a count / M is exact in FP32.
 * Nothing here is a float but that last conversion. The candidates never import this module.
 *
 * The light families' streams are here too (issue #24: in NumPy they cost as much as the torch
 * candidate's own time): rng_cases, categorical_cases and allocation_cases (the fields of
 * rng_arrays_numpy, categorical_arrays_numpy and allocation_arrays_numpy, and their engine records:
 * R22 and R23, R08, R06), each held to its NumPy path by the same test file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native_module.h"
#include "philox4x32.h"
#include "verification_engine.h"

#define ROWS (2 * KMAX + 1) /* q rows 0..4, then p rows 0..5 */
#define M_COUNT (1u << 24)
#define TAG 4u              /* the verification_round stream's tag */

/* Blocks j[0..n-1] of case i's stream (block j at counter (i mod 2^32, i >> 32, j, TAG)), their
 * words 0..3 written at out[4 l .. 4 l + 3] for the l-th block. */
static inline void stream_blocks(uint64_t i, const uint32_t *j, int n, uint32_t *out) {
    uint32_t c0[2 * ROWS + 2], c1[2 * ROWS + 2], c2[2 * ROWS + 2], c3[2 * ROWS + 2];
    for (int l = 0; l < n; l++) {
        c0[l] = (uint32_t)i;
        c1[l] = (uint32_t)(i >> 32);
        c2[l] = j[l];
        c3[l] = TAG;
    }
    philox_lanes(c0, c1, c2, c3, n, STREAM_KEY0, STREAM_KEY1);
    for (int l = 0; l < n; l++) {
        out[4 * l] = c0[l];
        out[4 * l + 1] = c1[l];
        out[4 * l + 2] = c2[l];
        out[4 * l + 3] = c3[l];
    }
}

/* Output word 0 of the RNG ABI draw with draw counter 0 (docs/rng-abi.md). */
static inline uint32_t draw_word0(uint64_t seed, uint32_t position, uint32_t round, uint32_t generation,
                                  uint32_t domain) {
    uint32_t c[4] = {position, round, generation, domain << 24};
    philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return c[0];
}

/* A cut point of a row word: the top 24 bits, or in coarse mode the top 4 (multiples of 2^20). */
static inline uint32_t row_cut(uint32_t word, int coarse) { return (word >> 8) & (coarse ? 0xF00000u : 0xFFFFFFu); }

/* SORT7 of accumulated.py: a sorting network of the seven cut points (no branch to mispredict). */
static const int SORT7[16][2] = {
    {0, 6}, {2, 3}, {4, 5}, {0, 2}, {1, 4}, {3, 6}, {0, 1}, {2, 5},
    {3, 4}, {1, 2}, {4, 6}, {2, 3}, {4, 5}, {1, 2}, {3, 4}, {5, 6},
};

/* Dyadic24 counts from VMAX - 1 cut points: cuts at index >= V - 1 are M, the cuts sorted, the
 * counts the gaps of 0, cuts..., M (counts_from_cuts). */
static inline void counts_from_cuts(const uint32_t cuts[VMAX - 1], int64_t vocab, uint64_t counts[VMAX]) {
    uint32_t s[VMAX - 1];
    for (int c = 0; c < VMAX - 1; c++) s[c] = vocab - 1 <= c ? M_COUNT : cuts[c];
    for (int e = 0; e < 16; e++) {
        uint32_t a = s[SORT7[e][0]], b = s[SORT7[e][1]];
        s[SORT7[e][0]] = a < b ? a : b;
        s[SORT7[e][1]] = a < b ? b : a;
    }
    counts[0] = s[0];
    for (int c = 1; c < VMAX - 1; c++) counts[c] = s[c] - s[c - 1];
    counts[VMAX - 1] = M_COUNT - s[VMAX - 2];
}

/* R08 over a count row: the first index whose cumulative count is strictly greater than u24
 * (index 0 where none is, as NumPy's argmax of an all-false row). */
static inline int64_t sample_row(const uint64_t counts[VMAX], uint64_t u24) {
    /* the cumulative counts do not decrease: the first index above u24 is the number at most u24 */
    uint64_t cumulative = 0;
    int64_t at_most = 0;
    for (int v = 0; v < VMAX; v++) {
        cumulative += counts[v];
        at_most += cumulative <= u24;
    }
    return at_most == VMAX ? 0 : at_most;
}

/* The buffers of one call, in the order of the arguments. */
enum {
    F_SEED, F_GENERATION, F_ROUND, F_ANCHOR, F_DEPTH, F_VOCAB, F_DRAFTS, F_Q, F_P,
    B_GENERATION, B_ROUND, B_ANCHOR, B_DEPTH, B_VOCAB, B_DRAFTS, B_Q, B_P,
    BUFFERS
};
/* bytes of one case in each buffer */
static const Py_ssize_t CASE_BYTES[BUFFERS] = {
    8, 8, 8, 8, 8, 8, 8 * KMAX, 8 * KMAX * VMAX, 8 * (KMAX + 1) * VMAX,
    4, 4, 4, 4, 4, 4 * KMAX, 4 * KMAX * VMAX, 4 * (KMAX + 1) * VMAX,
};

typedef struct {
    uint64_t *seed, *generation, *round, *anchor;
    int64_t *depth, *vocab, *drafts;
    uint64_t *q, *p;
    uint32_t *b_generation, *b_round, *b_anchor, *b_depth, *b_vocab, *b_drafts, *b_q;
    float *b_p;
} Out;

/* Case i, written at index k of every array. */
static void one_case(uint64_t i, Py_ssize_t k, const Out *o) {
    static const uint32_t HEAD[2] = {0, 1};
    uint32_t head[8], *b0 = head, *b1 = head + 4;
    stream_blocks(i, HEAD, 2, head);
    uint64_t seed = (uint64_t)b0[0] | (uint64_t)b0[1] << 32;
    uint32_t generation = b0[2], round = b0[3];
    int64_t depth = 1 + b1[1] % KMAX, vocab = 2 + b1[2] % (VMAX - 1);
    uint32_t mode = b1[3] & 3u;
    int coarse = (b1[3] >> 2) & 1u;
    uint32_t anchor = ((b1[3] >> 3) & 7u) == 0 ? 0xFFFFFFFFu - (b1[0] & 7u) : b1[0];

    /* row r from blocks 2 + 2r and 3 + 2r: the rows a case reads (q rows up to K, p rows up to
     * K), zero words for the others */
    uint32_t words[ROWS][8], blocks[2 * ROWS], drawn[8 * ROWS];
    uint64_t counts[ROWS][VMAX];
    int rows[ROWS], n_rows = 0;
    for (int r = 0; r < ROWS; r++) {
        memset(words[r], 0, sizeof words[r]);
        if (r <= depth || (r >= KMAX && r <= KMAX + depth)) {
            blocks[2 * n_rows] = 2 + 2 * r;
            blocks[2 * n_rows + 1] = 3 + 2 * r;
            rows[n_rows++] = r;
        }
    }
    stream_blocks(i, blocks, 2 * n_rows, drawn);
    for (int l = 0; l < n_rows; l++) memcpy(words[rows[l]], drawn + 8 * l, sizeof words[0]);
    for (int r = 0; r < ROWS; r++) {
        uint32_t cuts[VMAX - 1];
        for (int c = 0; c < VMAX - 1; c++) cuts[c] = row_cut(words[r][c], coarse);
        counts_from_cuts(cuts, vocab, counts[r]);
    }
    uint64_t(*q)[VMAX] = counts, (*p)[VMAX] = counts + KMAX;
    uint32_t(*p_words)[8] = words + KMAX;
    int64_t drafts[KMAX];
    for (int r = 0; r < KMAX; r++) drafts[r] = sample_row(q[r], words[r][7] >> 8);

    if (mode == 1 || mode == 3) {
        /* mode 1: p = q at every draft position but the one chosen by word 7 of p_1; mode 3: at every one */
        int64_t keep = mode == 1 ? (int64_t)(p_words[0][7] % (uint32_t)depth) : -1;
        for (int r = 0; r < KMAX; r++)
            if (r != keep) memcpy(p[r], q[r], sizeof p[r]);
    }
    if (mode == 2) {
        /* p = q except at the draft: p(x) = clamp(ceil(a q(x) / 2^32) + delta, 0, q(x)), the
         * difference at x + 1 mod V (a the acceptance draw of the RNG ABI at anchor + r) */
        for (int r = 0; r < depth; r++) {
            int64_t x = drafts[r];
            int64_t qx = (int64_t)q[r][x];
            uint32_t a = draw_word0(seed, anchor + (uint32_t)r, round, generation, ACCEPT);
            int64_t delta = (int64_t)(p_words[r][7] % 3u) - 1;
            int64_t target = (int64_t)(((uint64_t)a * (uint64_t)qx + 0xFFFFFFFFull) >> 32) + delta;
            target = target < 0 ? 0 : target > qx ? qx : target;
            memcpy(p[r], q[r], sizeof p[r]);
            p[r][x] = (uint64_t)target;
            p[r][(x + 1) % vocab] += (uint64_t)(qx - target);
        }
    }
    if (mode == 3) {
        /* the bonus row p_{K+1}: cut 0 at the CORRECTION draw at anchor + K (>> 8, + bit 0 of its word 7) */
        uint32_t b = draw_word0(seed, anchor + (uint32_t)depth, round, generation, CORRECTION);
        const uint32_t *bonus = p_words[depth];
        uint32_t cuts[VMAX - 1];
        for (int c = 0; c < VMAX - 1; c++) cuts[c] = row_cut(bonus[c], coarse);
        uint32_t first = (b >> 8) + (bonus[7] & 1u);
        cuts[0] = first < M_COUNT ? first : M_COUNT;
        counts_from_cuts(cuts, vocab, p[depth]);
    }

    o->seed[k] = seed;
    o->generation[k] = generation;
    o->round[k] = round;
    o->anchor[k] = anchor;
    o->depth[k] = depth;
    o->vocab[k] = vocab;
    memcpy(o->drafts + KMAX * k, drafts, sizeof drafts);
    memcpy(o->q + KMAX * VMAX * k, q, KMAX * sizeof q[0]);
    memcpy(o->p + (KMAX + 1) * VMAX * k, p, (KMAX + 1) * sizeof p[0]);

    o->b_generation[k] = generation;
    o->b_round[k] = round;
    o->b_anchor[k] = anchor;
    o->b_depth[k] = (uint32_t)depth;
    o->b_vocab[k] = (uint32_t)vocab;
    for (int r = 0; r < KMAX; r++) {
        int inside = r < depth;
        o->b_drafts[KMAX * k + r] = inside ? (uint32_t)drafts[r] : 0;
        for (int v = 0; v < VMAX; v++) o->b_q[(KMAX * k + r) * VMAX + v] = inside ? (uint32_t)q[r][v] : 0;
    }
    for (int r = 0; r <= KMAX; r++) {
        int inside = r <= depth;
        for (int v = 0; v < VMAX; v++)
            o->b_p[((KMAX + 1) * k + r) * VMAX + v] = inside ? (float)p[r][v] * (1.0f / (float)M_COUNT) : 0.0f;
    }
}

/* Cases per group of the fused path: the group's rows, just written, are still in the core's caches when the
 * engine reads them, instead of a block's 10 MB read again in a second pass (bench/RESULTS.md, issue #24,
 * "The engine fused with the stream"). */
#define FUSED_CASES 64

/* The engine's views of the fields (verification_engine.h), over the contiguous arrays of o. */
static inline __attribute__((always_inline)) void engine_views(const Out *o, View v[E_INPUTS]) {
    const void *base[E_INPUTS] = {o->seed, o->generation, o->round, o->anchor, o->depth, o->q, o->p, o->drafts};
    const ptrdiff_t row[E_INPUTS] = {8, 8, 8, 8, 8, 8 * KMAX * VMAX, 8 * (KMAX + 1) * VMAX, 8 * KMAX};
    const ptrdiff_t inner[E_INPUTS][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {8 * VMAX, 8}, {8 * VMAX, 8}, {8, 0}};
    for (int e = 0; e < E_INPUTS; e++) {
        v[e].base = (const char *)base[e];
        v[e].s[0] = row[e];
        v[e].s[1] = inner[e][0];
        v[e].s[2] = inner[e][1];
    }
}

/* The engine over one group of the fused path: a function of its own (not inlined), so that a sampling
 * profile (perf) tells the engine's time from the stream's; verify_chunk is inlined into it with the
 * fields' strides as constants. */
static __attribute__((noinline)) void fused_engine(Py_ssize_t lo, Py_ssize_t hi, const Out *o, uint32_t *records) {
    View fields[E_INPUTS];
    engine_views(o, fields);
    verify_chunk(lo, hi, fields, records);
}

static PyObject *verification_cases(PyObject *self, PyObject *args) {
    unsigned long long first;
    Py_buffer view[BUFFERS + 1];
    memset(&view[BUFFERS], 0, sizeof view[BUFFERS]);
    if (!PyArg_ParseTuple(args, "Kw*w*w*w*w*w*w*w*w*w*w*w*w*w*w*w*w*|w*", &first, &view[0], &view[1], &view[2],
                          &view[3], &view[4], &view[5], &view[6], &view[7], &view[8], &view[9], &view[10],
                          &view[11], &view[12], &view[13], &view[14], &view[15], &view[16], &view[BUFFERS]))
        return NULL;
    int fused = view[BUFFERS].obj != NULL;
    Py_ssize_t n = view[F_SEED].len / CASE_BYTES[F_SEED];
    int ok = 1;
    for (int b = 0; b < BUFFERS + fused; b++)
        ok &= view[b].len == n * (b < BUFFERS ? CASE_BYTES[b] : 4 * VERIFY_WORDS) && PyBuffer_IsContiguous(&view[b], 'C');
    if (ok) {
        Out o = {
            view[F_SEED].buf, view[F_GENERATION].buf, view[F_ROUND].buf, view[F_ANCHOR].buf,
            view[F_DEPTH].buf, view[F_VOCAB].buf, view[F_DRAFTS].buf, view[F_Q].buf, view[F_P].buf,
            view[B_GENERATION].buf, view[B_ROUND].buf, view[B_ANCHOR].buf, view[B_DEPTH].buf,
            view[B_VOCAB].buf, view[B_DRAFTS].buf, view[B_Q].buf, view[B_P].buf,
        };
        uint32_t *records = fused ? view[BUFFERS].buf : NULL;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t lo = 0; lo < n; lo += FUSED_CASES) {
            Py_ssize_t hi = lo + FUSED_CASES < n ? lo + FUSED_CASES : n;
            for (Py_ssize_t k = lo; k < hi; k++) {
                one_case((uint64_t)first + (uint64_t)k, k, &o);
                if (fused) record_prefetch(records + k * VERIFY_WORDS); /* its lines in by the time the engine writes */
            }
            if (fused) fused_engine(lo, hi, &o, records + lo * VERIFY_WORDS);
        }
        Py_END_ALLOW_THREADS
    }
    for (int b = 0; b < BUFFERS + fused; b++) PyBuffer_Release(&view[b]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "every buffer must be C-contiguous and hold the same number of cases");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Cases per pass of the light families' streams (categorical_cases, allocation_cases): their blocks
 * go through the lane form of Philox together, then each case is assembled from its words. */
#define LIGHT_CASES 64
/* The most stream blocks a light family's case takes (categorical_sampling: 5). */
#define LIGHT_BLOCKS 5

/* Words [LIGHT_CASES][4 * blocks] of cases first + lo .. first + lo + n - 1 of stream tag. */
static inline void light_words(unsigned tag, uint64_t first, Py_ssize_t lo, int n, int blocks,
                               uint32_t words[LIGHT_CASES][4 * LIGHT_BLOCKS]) {
    uint32_t c0[LIGHT_CASES * LIGHT_BLOCKS], c1[LIGHT_CASES * LIGHT_BLOCKS], c2[LIGHT_CASES * LIGHT_BLOCKS],
        c3[LIGHT_CASES * LIGHT_BLOCKS];
    for (int l = 0; l < n * blocks; l++) {
        uint64_t i = first + (uint64_t)lo + (uint64_t)(l / blocks);
        c0[l] = (uint32_t)i;
        c1[l] = (uint32_t)(i >> 32);
        c2[l] = (uint32_t)(l % blocks);
        c3[l] = tag;
    }
    philox_lanes(c0, c1, c2, c3, n * blocks, STREAM_KEY0, STREAM_KEY1);
    for (int l = 0; l < n * blocks; l++) {
        uint32_t *w = words[l / blocks] + 4 * (l % blocks);
        w[0] = c0[l];
        w[1] = c1[l];
        w[2] = c2[l];
        w[3] = c3[l];
    }
}

/* Whether every buffer is C-contiguous and holds n cases of its bytes a case; releases them all
 * and sets the error when not. */
static int light_buffers(Py_buffer *view, const Py_ssize_t *case_bytes, int count, Py_ssize_t *n) {
    *n = view[0].len / case_bytes[0];
    int ok = 1;
    for (int b = 0; b < count; b++) ok &= view[b].len == *n * case_bytes[b] && PyBuffer_IsContiguous(&view[b], 'C');
    if (!ok) {
        for (int b = 0; b < count; b++) PyBuffer_Release(&view[b]);
        PyErr_SetString(PyExc_ValueError, "every buffer must be C-contiguous and hold the same number of cases");
    }
    return ok;
}

/* rng_cases(first, seed, generation, round, position, domain, draw_counter, records): rng_abi's cases
 * from case first (``rng_arrays_numpy`` of accumulated.py): each field u64 [n]; and the engine's
 * records u32 [n, 10] (``rng_records``: the draw's counter words, Philox4x32-10 of that counter
 * under the seed's two words, then u24 and u32 of output word 0; R22, R23). */
static PyObject *rng_cases(PyObject *self, PyObject *args) {
    unsigned long long first;
    Py_buffer view[7];
    if (!PyArg_ParseTuple(args, "Kw*w*w*w*w*w*w*", &first, &view[0], &view[1], &view[2], &view[3], &view[4],
                          &view[5], &view[6]))
        return NULL;
    static const Py_ssize_t case_bytes[7] = {8, 8, 8, 8, 8, 8, 4 * 10};
    Py_ssize_t n;
    if (!light_buffers(view, case_bytes, 7, &n)) return NULL;
    uint64_t *seed = view[0].buf, *generation = view[1].buf, *round = view[2].buf, *position = view[3].buf,
             *domain = view[4].buf, *draw_counter = view[5].buf;
    uint32_t *records = view[6].buf;
    Py_BEGIN_ALLOW_THREADS
    uint32_t words[LIGHT_CASES][4 * LIGHT_BLOCKS];
    for (Py_ssize_t lo = 0; lo < n; lo += LIGHT_CASES) {
        int group = n - lo < LIGHT_CASES ? (int)(n - lo) : LIGHT_CASES;
        light_words(1u, first, lo, group, 2, words);
        for (int g = 0; g < group; g++) {
            const uint32_t *w = words[g];
            Py_ssize_t k = lo + g;
            seed[k] = (uint64_t)w[0] | (uint64_t)w[1] << 32;
            position[k] = w[2];
            round[k] = w[3];
            generation[k] = w[4];
            domain[k] = 1 + w[5] % 3;
            draw_counter[k] = w[6] >> 8;
            uint32_t *r = records + 10 * k;
            r[0] = w[2];
            r[1] = w[3];
            r[2] = w[4];
            r[3] = (uint32_t)(domain[k] << 24 | draw_counter[k]);
            uint32_t c[4] = {r[0], r[1], r[2], r[3]};
            philox(c, w[0], w[1]);
            r[4] = c[0];
            r[5] = c[1];
            r[6] = c[2];
            r[7] = c[3];
            r[8] = c[0] >> 8;
            r[9] = c[0];
        }
    }
    Py_END_ALLOW_THREADS
    for (int b = 0; b < 7; b++) PyBuffer_Release(&view[b]);
    Py_RETURN_NONE;
}

/* categorical_cases(first, vocab, counts, draws, records): categorical_sampling's cases from case
 * first (``categorical_arrays_numpy`` of accumulated.py, the definition the tests hold this to):
 * vocab u64 [n], counts u64 [n, VMAX], draws u64 [n, DRAWS]; and the engine's records u32
 * [n, DRAWS] (``categorical_records``: R08 on each draw), each group made and verified in one pass. */
static PyObject *categorical_cases(PyObject *self, PyObject *args) {
    unsigned long long first;
    Py_buffer view[4];
    if (!PyArg_ParseTuple(args, "Kw*w*w*w*", &first, &view[0], &view[1], &view[2], &view[3])) return NULL;
    static const Py_ssize_t case_bytes[4] = {8, 8 * VMAX, 8 * 4, 4 * 4};
    Py_ssize_t n;
    if (!light_buffers(view, case_bytes, 4, &n)) return NULL;
    uint64_t *vocab_out = view[0].buf, *counts_out = view[1].buf, *draws_out = view[2].buf;
    uint32_t *records = view[3].buf;
    Py_BEGIN_ALLOW_THREADS
    uint32_t words[LIGHT_CASES][4 * LIGHT_BLOCKS];
    for (Py_ssize_t lo = 0; lo < n; lo += LIGHT_CASES) {
        int group = n - lo < LIGHT_CASES ? (int)(n - lo) : LIGHT_CASES;
        light_words(2u, first, lo, group, 5, words);
        for (int g = 0; g < group; g++) {
            const uint32_t *w = words[g]; /* block j is w[4 j .. 4 j + 3] */
            Py_ssize_t k = lo + g;
            uint64_t vocab = 1 + w[0] % VMAX;
            int coarse = w[1] & 1;
            uint32_t cuts[VMAX - 1];
            for (int c = 0; c < VMAX - 1; c++) cuts[c] = row_cut(w[4 + c], coarse); /* blocks 1 and 2's first three */
            uint64_t *counts = counts_out + VMAX * k;
            counts_from_cuts(cuts, (int64_t)vocab, counts);
            uint64_t cumulative[VMAX], total = 0;
            for (int v = 0; v < VMAX; v++) cumulative[v] = total += counts[v];
            for (int d = 0; d < 4; d++) {
                uint32_t select = w[12 + d], value = w[16 + d]; /* blocks 3 and 4 */
                uint64_t edge = cumulative[(select >> 2) % vocab], draw;
                switch (select & 3) {
                case 2: draw = edge; break;
                case 3: draw = (edge > 1 ? edge : 1) - 1; break;
                default: draw = value >> 8;
                }
                draw = draw < M_COUNT - 1 ? draw : M_COUNT - 1;
                draws_out[4 * k + d] = draw;
                records[4 * k + d] = (uint32_t)sample_row(counts, draw);
            }
            vocab_out[k] = vocab;
        }
    }
    Py_END_ALLOW_THREADS
    for (int b = 0; b < 4; b++) PyBuffer_Release(&view[b]);
    Py_RETURN_NONE;
}

/* allocation_cases(first, vocab, weights, records): allocation_dense's cases from case first
 * (``allocation_arrays_numpy``): vocab u64 [n], weights u64 [n, VMAX] (integers below 2^23, zero
 * from V on, never all zero); and the engine's records u32 [n, VMAX] (``allocation_records``, R06:
 * the floors of M w_v / W, then one ticket per largest remainder, ties to the lowest ID; M w_v is
 * below 2^47 and the ranking key below 2^29, exact in 64 bits). */
static PyObject *allocation_cases(PyObject *self, PyObject *args) {
    unsigned long long first;
    Py_buffer view[3];
    if (!PyArg_ParseTuple(args, "Kw*w*w*", &first, &view[0], &view[1], &view[2])) return NULL;
    static const Py_ssize_t case_bytes[3] = {8, 8 * VMAX, 4 * VMAX};
    Py_ssize_t n;
    if (!light_buffers(view, case_bytes, 3, &n)) return NULL;
    uint64_t *vocab_out = view[0].buf, *weights_out = view[1].buf;
    uint32_t *records = view[2].buf;
    static const unsigned SHIFTS[4] = {12, 28, 30, 9};
    Py_BEGIN_ALLOW_THREADS
    uint32_t words[LIGHT_CASES][4 * LIGHT_BLOCKS];
    for (Py_ssize_t lo = 0; lo < n; lo += LIGHT_CASES) {
        int group = n - lo < LIGHT_CASES ? (int)(n - lo) : LIGHT_CASES;
        light_words(3u, first, lo, group, 3, words);
        for (int g = 0; g < group; g++) {
            const uint32_t *w = words[g];
            Py_ssize_t k = lo + g;
            uint64_t vocab = 1 + w[0] % VMAX, total = 0;
            unsigned shift = SHIFTS[w[1] & 3];
            uint64_t *weights = weights_out + VMAX * k;
            for (int v = 0; v < VMAX; v++) total += weights[v] = (uint64_t)v < vocab ? w[4 + v] >> shift : 0;
            if (total == 0) total = weights[vocab - 1] = 1;
            uint64_t floors[VMAX], key[VMAX], remaining = M_COUNT;
            for (int v = 0; v < VMAX; v++) {
                uint64_t scaled = weights[v] * M_COUNT;
                floors[v] = scaled / total;
                key[v] = scaled % total * VMAX + (VMAX - 1 - v); /* remainder descending, then ID ascending */
                remaining -= floors[v];
            }
            for (int v = 0; v < VMAX; v++) {
                uint64_t above = 0; /* the rank of v: the keys above its own (the keys are distinct) */
                for (int u = 0; u < VMAX; u++) above += key[u] > key[v];
                records[VMAX * k + v] = (uint32_t)(floors[v] + (above < remaining));
            }
            vocab_out[k] = vocab;
        }
    }
    Py_END_ALLOW_THREADS
    for (int b = 0; b < 3; b++) PyBuffer_Release(&view[b]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"verification_cases", verification_cases, METH_VARARGS,
     "verification_cases(first, fields..., block...[, records]): the verification_round stream's cases from "
     "case first, and with records their engine records (see the module source)."},
    {"rng_cases", rng_cases, METH_VARARGS,
     "rng_cases(first, seed, generation, round, position, domain, draw_counter, records): rng_abi's cases and "
     "engine records."},
    {"categorical_cases", categorical_cases, METH_VARARGS,
     "categorical_cases(first, vocab, counts, draws, records): categorical_sampling's cases and engine records."},
    {"allocation_cases", allocation_cases, METH_VARARGS,
     "allocation_cases(first, vocab, weights, records): allocation_dense's cases and engine records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_accumulated_stream", "The accumulated input streams in C (accumulated.py).", -1,
    methods,
};

/* the module, with the digest of its sources (qconform/native_module.h) */
PyMODINIT_FUNC PyInit__accumulated_stream(void) { return native_module_create(&module); }
