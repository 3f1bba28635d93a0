/* The exact engine of the verification_round accumulated stream over a chunk of cases (docs/accumulated.md,
 * "The engine"), shared by the two C modules of generators/: the engine module (_verification_engine.c,
 * over the stream's arrays in place, any strides) and the input stream (_accumulated_stream.c, which runs it
 * on each small group of cases it has just written, while their rows are still in the core's cache: the
 * fused path). One definition of the rules in C; tests/generators/test_verification_engine_native.py holds
 * both paths to the NumPy engine (accumulated_engine.verification_records_numpy).
 *
 * Every quantity is an exact unsigned integer (no floats), with these bounds (the stream's inputs,
 * accumulated.verification_arrays): the key, counter and draw words are below 2^32; the counts q and p are
 * dyadic24 counts, at most M = 2^24, and a row sums to M, so a residual's total and every cumulative count
 * C_v are at most 2^24. Hence u32 * q(x) < 2^56, p(x) * 2^32 <= 2^56, u32 * R < 2^56 and C_v * 2^32 <= 2^56:
 * every product fits in uint64 with room to spare.
 *
 * A chunk goes in passes, so that the Philox blocks of different cases overlap in the pipeline (a block is a
 * chain of ten dependent multiplications; one case's draws alone would wait on each other and on its
 * branches), and no pass takes a branch that depends on one case (each would be mispredicted about once a
 * case, at a cost near a Philox block's):
 *   1, 2. the acceptance draws the round consumes and their tests, in waves: wave k draws position k of every
 *      case still accepting (independent draws), then tests them and keeps the cases that accept and have a
 *      next position (the list of a wave made without a branch). Only consumed draws are computed: 2.3 a
 *      case on the stream against 3 below K (bench/RESULTS.md, issue #24, "The engine fused with the stream");
 *   3. the final draw at anchor + accepted;
 *   4. the pick and the record, its padding by masks. */
#ifndef QCONFORM_VERIFICATION_ENGINE_H
#define QCONFORM_VERIFICATION_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "philox4x32.h"

#define VERIFY_WORDS (3 + (KMAX + 1) + 5 * (KMAX + 1)) /* accumulated.VERIFY_WORDS */
#define PAD 0xFFFFFFFFu
#define D_ACCEPT 0u /* decision codes of a record */
#define D_REJECT 1u
#define D_CORRECTION 2u
#define D_BONUS 3u /* D_CORRECTION + 1: the record's final decision is D_CORRECTION + full */
#define ENGINE_CHUNK 256 /* most cases of one verify_chunk */

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
    ptrdiff_t s[3];
} View;

#define AT(view, T, i, j, v) (*(const T *)((view).base + (i) * (view).s[0] + (j) * (view).s[1] + (v) * (view).s[2]))

/* The engine's inputs, in the order of verification_records' arguments. */
enum { E_SEED, E_GENERATION, E_ROUND, E_ANCHOR, E_DEPTH, E_Q, E_P, E_DRAFTS, E_INPUTS };

typedef struct {
    uint32_t k0, k1, generation, rnd, anchor;
    int depth, accepted;
    uint32_t u32[KMAX + 1];    /* the acceptance draws consumed (zero after them), then the final draw */
    uint32_t drafts[KMAX + 1]; /* the drafts tested (zero after them) */
} Case;

/* The records of cases lo .. hi - 1 (hi - lo <= ENGINE_CHUNK) of the views f[E_INPUTS], written whole at
 * records (VERIFY_WORDS words a case). Every depth is in 1 .. KMAX and every draft below K is below VMAX
 * (the caller checks, or made them); the positions from K on are never read. Inlined where it is called, so
 * that the fused path's strides, constants there, fold into its addresses. */
static inline __attribute__((always_inline)) void verify_chunk(ptrdiff_t lo, ptrdiff_t hi, const View *f, uint32_t *records) {
    Case cases[ENGINE_CHUNK];
    uint8_t active[ENGINE_CHUNK]; /* the cases of a wave (indices in the chunk) */
    const View q = f[E_Q], p = f[E_P], drafts = f[E_DRAFTS];
    int n = (int)(hi - lo), m = n;
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        Case *s = &cases[c];
        uint64_t seed = AT(f[E_SEED], uint64_t, i, 0, 0);
        s->k0 = (uint32_t)seed;
        s->k1 = (uint32_t)(seed >> 32);
        s->generation = (uint32_t)AT(f[E_GENERATION], uint64_t, i, 0, 0);
        s->rnd = (uint32_t)AT(f[E_ROUND], uint64_t, i, 0, 0);
        s->anchor = (uint32_t)AT(f[E_ANCHOR], uint64_t, i, 0, 0);
        s->depth = (int)AT(f[E_DEPTH], int64_t, i, 0, 0);
        s->accepted = 0;
        memset(s->u32, 0, sizeof s->u32 + sizeof s->drafts);
        active[c] = (uint8_t)c;
    }
    /* 1, 2. the acceptance draws the round consumes, and their tests, in waves: wave k draws position k of
       every case that accepted positions 0 .. k - 1 and has k < K (independent draws, one after the other),
       then tests them: accept iff u32 q(x) < p(x) 2^32 (both below 2^57). A case leaves at its first
       rejection or after K accepts; accepted counts its accepts */
    for (int k = 0; k < KMAX && m > 0; k++) {
        for (int l = 0; l < m; l++) {
            Case *s = &cases[active[l]];
            s->u32[k] = draw(s->anchor + (uint32_t)k, s->rnd, s->generation, ACCEPT, s->k0, s->k1);
        }
        int next = 0;
        for (int l = 0; l < m; l++) {
            int c = active[l];
            ptrdiff_t i = lo + c;
            Case *s = &cases[c];
            int64_t x = AT(drafts, int64_t, i, k, 0);
            int accept = (uint64_t)s->u32[k] * AT(q, uint64_t, i, k, x) < AT(p, uint64_t, i, k, x) << 32;
            s->drafts[k] = (uint32_t)x;
            s->accepted = k + accept;
            active[next] = (uint8_t)c;
            next += accept & (k + 1 < s->depth);
        }
        m = next;
    }
    /* 3. the final draw at anchor + accepted (mod 2^32) */
    for (int c = 0; c < n; c++) {
        Case *s = &cases[c];
        s->u32[KMAX] = draw(s->anchor + (uint32_t)s->accepted, s->rnd, s->generation, CORRECTION, s->k0, s->k1);
    }
    /* 4. the pick and the record (accumulated.verification_record's layout) */
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        const Case *s = &cases[c];
        uint32_t *rec = records + c * VERIFY_WORDS, *emitted = rec + 2, *draws = rec + 4 + KMAX;
        /* full (K accepts) as 0 or 1 in arithmetic, not a branch: it is about as often true as false */
        int accepted = s->accepted, full = accepted == s->depth, tested = accepted + 1 - full;
        /* from the bonus row p_{K+1} after K accepts, else the residual max(p - q, 0) at the rejection: the
           first v with C_v 2^32 > u32 R (C_v, R at most 2^24), token 0 if none. C is nondecreasing, so the
           first such v is the number of v with C_v 2^32 <= u32 R. The q row is read at the rejection only
           (row K does not exist when K = KMAX): masked to zero after K accepts */
        uint64_t cumulative[VMAX], total = 0, q_mask = (uint64_t)full - 1;
        int q_row = accepted < KMAX ? accepted : KMAX - 1;
        for (int v = 0; v < VMAX; v++) {
            uint64_t pv = AT(p, uint64_t, i, accepted, v), qv = AT(q, uint64_t, i, q_row, v) & q_mask;
            total += (pv - qv) & -(uint64_t)(pv > qv); /* a mask, not a branch: the sign is a coin toss */
            cumulative[v] = total;
        }
        uint64_t threshold = (uint64_t)s->u32[KMAX] * total;
        uint32_t below = 0;
        for (int v = 0; v < VMAX; v++) below += (cumulative[v] << 32) <= threshold;
        uint32_t token = below < VMAX ? below : 0;
        rec[0] = (uint32_t)accepted;
        rec[1] = (uint32_t)accepted + 1;
        rec[3 + KMAX] = (uint32_t)tested + 1;
        /* the emitted drafts below accepted then padding (PAD is all ones: v | ~mask keeps v or pads), the
           token over the slot at accepted; the draw slots: the acceptance draws below tested then padding,
           the final draw over the slot at tested */
        for (int k = 0; k <= KMAX; k++) {
            uint32_t emit = -(uint32_t)(k < accepted), test = -(uint32_t)(k < tested), *d = draws + 5 * k;
            emitted[k] = s->drafts[k] | ~emit;
            d[0] = ACCEPT | ~test;
            d[1] = (s->anchor + (uint32_t)k) | ~test;
            d[2] = s->u32[k] | ~test;
            d[3] = (k < accepted ? D_ACCEPT : D_REJECT) | ~test;
            d[4] = s->drafts[k] | ~test;
        }
        emitted[accepted] = token;
        uint32_t *d = draws + 5 * tested;
        d[0] = CORRECTION;
        d[1] = s->anchor + (uint32_t)accepted;
        d[2] = s->u32[KMAX];
        d[3] = D_CORRECTION + (uint32_t)full; /* D_BONUS after K accepts */
        d[4] = token;
    }
}

#endif
