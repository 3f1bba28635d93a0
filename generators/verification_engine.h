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
#define ENGINE_CHUNK 64 /* most cases of one verify_chunk */

/* A strided view: element [i, j, v] at base + i * s[0] + j * s[1] + v * s[2] (bytes). */
typedef struct {
    const char *base;
    ptrdiff_t s[3];
} View;

#define AT(view, T, i, j, v) (*(const T *)((view).base + (i) * (view).s[0] + (j) * (view).s[1] + (v) * (view).s[2]))

/* The engine's inputs, in the order of verification_records' arguments. */
enum { E_SEED, E_GENERATION, E_ROUND, E_ANCHOR, E_DEPTH, E_Q, E_P, E_DRAFTS, E_INPUTS };

/* The draws of one pass (a wave's acceptance draws, or the final draws), one lane a draw: the counter's four
 * words and the key's two, gathered from the cases, then Philox over all the lanes at once
 * (philox_keyed_lanes, vectorized); word 0 of each block is left in c0. */
typedef struct {
    uint32_t c0[ENGINE_CHUNK], c1[ENGINE_CHUNK], c2[ENGINE_CHUNK], c3[ENGINE_CHUNK], k0[ENGINE_CHUNK], k1[ENGINE_CHUNK];
} Lanes;

/* The cases of a chunk, one array a field (so that a pass reads a field of consecutive cases as a vector). */
typedef struct {
    uint32_t k0[ENGINE_CHUNK], k1[ENGINE_CHUNK], generation[ENGINE_CHUNK], rnd[ENGINE_CHUNK], anchor[ENGINE_CHUNK];
    int32_t depth[ENGINE_CHUNK], accepted[ENGINE_CHUNK];
    /* a case's own row each (the record reads them one case after the other): */
    uint32_t u32[ENGINE_CHUNK][KMAX + 1];    /* the acceptance draws consumed (zero after them), then the final draw */
    uint32_t drafts[ENGINE_CHUNK][KMAX + 1]; /* the drafts tested (zero after them, and at K) */
} Cases;

/* Lane l of a pass: the draw at (position, case c's round and generation, domain << 24) under c's seed. */
static inline void lane(Lanes *x, int l, const Cases *s, int c, uint32_t position, uint32_t domain) {
    x->c0[l] = position;
    x->c1[l] = s->rnd[c];
    x->c2[l] = s->generation[c];
    x->c3[l] = domain << 24;
    x->k0[l] = s->k0[c];
    x->k1[l] = s->k1[c];
}

/* The records of cases lo .. hi - 1 (hi - lo <= ENGINE_CHUNK) of the views f[E_INPUTS], written whole at
 * records (VERIFY_WORDS words a case). Every depth is in 1 .. KMAX and every draft below K is below VMAX
 * (the caller checks, or made them); the positions from K on are never read. Inlined where it is called, so
 * that the fused path's strides, constants there, fold into its addresses. */
static inline __attribute__((always_inline)) void verify_chunk(ptrdiff_t lo, ptrdiff_t hi, const View *f, uint32_t *records) {
    Cases s;
    Lanes x;
    uint8_t active[ENGINE_CHUNK]; /* the cases of a wave (indices in the chunk) */
    const View q = f[E_Q], p = f[E_P], drafts = f[E_DRAFTS];
    int n = (int)(hi - lo), m = n;
    memset(s.u32, 0, n * sizeof s.u32[0]);
    memset(s.drafts, 0, n * sizeof s.drafts[0]);
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        uint64_t seed = AT(f[E_SEED], uint64_t, i, 0, 0);
        s.k0[c] = (uint32_t)seed;
        s.k1[c] = (uint32_t)(seed >> 32);
        s.generation[c] = (uint32_t)AT(f[E_GENERATION], uint64_t, i, 0, 0);
        s.rnd[c] = (uint32_t)AT(f[E_ROUND], uint64_t, i, 0, 0);
        s.anchor[c] = (uint32_t)AT(f[E_ANCHOR], uint64_t, i, 0, 0);
        s.depth[c] = (int32_t)AT(f[E_DEPTH], int64_t, i, 0, 0);
        s.accepted[c] = 0;
        active[c] = (uint8_t)c;
    }
    /* 1, 2. the acceptance draws the round consumes, and their tests, in waves: wave k draws position k of
       every case that accepted positions 0 .. k - 1 and has k < K (independent draws, all the wave's lanes at
       once), then tests them: accept iff u32 q(x) < p(x) 2^32 (both below 2^57). A case leaves at its first
       rejection or after K accepts; accepted counts its accepts */
    for (int k = 0; k < KMAX && m > 0; k++) {
        for (int l = 0; l < m; l++) lane(&x, l, &s, active[l], s.anchor[active[l]] + (uint32_t)k, ACCEPT);
        philox_keyed_lanes(x.c0, x.c1, x.c2, x.c3, x.k0, x.k1, m);
        int next = 0;
        for (int l = 0; l < m; l++) {
            int c = active[l];
            ptrdiff_t i = lo + c;
            uint32_t u32 = x.c0[l];
            int64_t draft = AT(drafts, int64_t, i, k, 0);
            int accept = (uint64_t)u32 * AT(q, uint64_t, i, k, draft) < AT(p, uint64_t, i, k, draft) << 32;
            s.u32[c][k] = u32;
            s.drafts[c][k] = (uint32_t)draft;
            s.accepted[c] = k + accept;
            active[next] = (uint8_t)c;
            next += accept & (k + 1 < s.depth[c]);
        }
        m = next;
    }
    /* 3. the pick's counts, in a pass of their own (no draw waits on them, and the next case's loads need not
       wait for this case's record): from the bonus row p_{K+1} after K accepts, else the residual
       max(p - q, 0) at the rejection; the q row is read at the rejection only (row K does not exist when
       K = KMAX): masked to zero after K accepts. The cumulative counts C_v and the total R are at most 2^24:
       32-bit sums */
    uint32_t cumulative[ENGINE_CHUNK][VMAX];
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        int accepted = s.accepted[c], q_row = accepted < KMAX ? accepted : KMAX - 1;
        /* full (K accepts) as a mask in arithmetic, not a branch: it is about as often true as false */
        uint32_t total = 0, q_mask = (uint32_t)(accepted == s.depth[c]) - 1;
        for (int v = 0; v < VMAX; v++) {
            uint32_t pv = (uint32_t)AT(p, uint64_t, i, accepted, v), qv = (uint32_t)AT(q, uint64_t, i, q_row, v) & q_mask;
            total += (pv - qv) & -(uint32_t)(pv > qv); /* a mask, not a branch: the sign is a coin toss */
            cumulative[c][v] = total;
        }
    }
    /* 4. the final draws at anchor + accepted (mod 2^32), every case's at once */
    for (int c = 0; c < n; c++) lane(&x, c, &s, c, s.anchor[c] + (uint32_t)s.accepted[c], CORRECTION);
    philox_keyed_lanes(x.c0, x.c1, x.c2, x.c3, x.k0, x.k1, n);
    for (int c = 0; c < n; c++) s.u32[c][KMAX] = x.c0[c];
    /* 5. the pick and the record (accumulated.verification_record's layout) */
    for (int c = 0; c < n; c++) {
        uint32_t *rec = records + c * VERIFY_WORDS, *emitted = rec + 2, *draws = rec + 4 + KMAX;
        const uint32_t *u32 = s.u32[c], *drafted = s.drafts[c];
        uint32_t anchor = s.anchor[c], final_u32 = u32[KMAX];
        int accepted = s.accepted[c], full = accepted == s.depth[c], tested = accepted + 1 - full;
        /* the first v with C_v 2^32 > u32 R, token 0 if none. C is nondecreasing, so the first such v is the
           number of v with C_v 2^32 <= u32 R, that is C_v <= floor(u32 R / 2^32) (C_v an integer): compares
           of 32-bit counts, no shift of each C_v */
        uint32_t threshold = (uint32_t)(((uint64_t)final_u32 * cumulative[c][VMAX - 1]) >> 32), below = 0;
        for (int v = 0; v < VMAX; v++) below += cumulative[c][v] <= threshold;
        uint32_t token = below < VMAX ? below : 0;
        rec[0] = (uint32_t)accepted;
        rec[1] = (uint32_t)accepted + 1;
        rec[3 + KMAX] = (uint32_t)tested + 1;
        /* the emitted drafts below accepted then padding (PAD is all ones: v | ~mask keeps v or pads), the
           token over the slot at accepted; the draw slots: the acceptance draws below tested then padding,
           the final draw over the slot at tested */
        for (int k = 0; k <= KMAX; k++) {
            uint32_t emit = -(uint32_t)(k < accepted), test = -(uint32_t)(k < tested), *d = draws + 5 * k;
            uint32_t draft = drafted[k];
            emitted[k] = draft | ~emit;
            d[0] = ACCEPT | ~test;
            d[1] = (anchor + (uint32_t)k) | ~test;
            d[2] = u32[k] | ~test;
            d[3] = (k < accepted ? D_ACCEPT : D_REJECT) | ~test;
            d[4] = draft | ~test;
        }
        emitted[accepted] = token;
        uint32_t *d = draws + 5 * tested;
        d[0] = CORRECTION;
        d[1] = anchor + (uint32_t)accepted;
        d[2] = final_u32;
        d[3] = D_CORRECTION + (uint32_t)full; /* D_BONUS after K accepts */
        d[4] = token;
    }
}

#endif
