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
 * C_v are at most 2^24. Hence u32 * q(x) < 2^56, p(x) * 2^32 <= 2^56 and u32 * R < 2^56: every product fits
 * in uint64 with room to spare, and every count, total and cumulative count in uint32 (the pick's sums are
 * 32-bit; a count is read as its low 32 bits).
 *
 * A chunk goes in passes, so that the Philox blocks of different cases are computed together (all the draws of
 * a pass at once, vectorized: philox_keyed_lanes), and no pass takes a branch that depends on one case (each
 * would be mispredicted about once a case, at a cost near a Philox block's):
 *   0. the records are filled with padding, then the fields a pass knows are written over it;
 *   1, 2. the acceptance draws the round consumes and their tests, in waves: wave k draws position k of every
 *      case still accepting (independent draws), then tests them, writes their draw slots and emitted drafts,
 *      and lays out the next wave's lanes for the cases that accept and have a next position (without a
 *      branch). Only consumed draws are computed: 2.3 a case on the stream against 3 below K (bench/RESULTS.md,
 *      issue #24, "The engine fused with the stream");
 *   3. the final draws at anchor + accepted;
 *   4. the picks (the first count of the residual's, or the bonus row's, above the final draw's threshold);
 *   5. the record's last fields. */
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

/* The draws of one pass (a wave's acceptance draws, or the final draws), one lane a draw: the counter's words
 * 0-2 and the key's two, laid out from the cases, word 3 (the domain) filled for the whole pass, then Philox
 * over all the lanes at once (philox_keyed_lanes, vectorized); word 0 of each block is left in c0. */
typedef struct {
    uint32_t c0[ENGINE_CHUNK], c1[ENGINE_CHUNK], c2[ENGINE_CHUNK], c3[ENGINE_CHUNK], k0[ENGINE_CHUNK], k1[ENGINE_CHUNK];
} Lanes;

/* Lane l of a pass: the draw at (position, round, generation, the pass's domain << 24) under the key (k0, k1). */
static inline void lane(Lanes *x, int l, uint32_t position, uint32_t rnd, uint32_t generation,
                        uint32_t k0, uint32_t k1) {
    x->c0[l] = position;
    x->c1[l] = rnd;
    x->c2[l] = generation;
    x->k0[l] = k0;
    x->k1[l] = k1;
}

/* The records of cases lo .. hi - 1 (hi - lo <= ENGINE_CHUNK) of the views f[E_INPUTS], written whole at
 * records (VERIFY_WORDS words a case). Every depth is in 1 .. KMAX and every draft below K is below VMAX
 * (the caller checks, or made them); the positions from K on are never read. Inlined where it is called, so
 * that the fused path's strides, constants there, fold into its addresses. */
static inline __attribute__((always_inline)) void verify_chunk(ptrdiff_t lo, ptrdiff_t hi, const View *f, uint32_t *records) {
    /* the cases, one array a field */
    uint32_t k0[ENGINE_CHUNK], k1[ENGINE_CHUNK], generation[ENGINE_CHUNK], rnd[ENGINE_CHUNK], anchor[ENGINE_CHUNK];
    int32_t depth[ENGINE_CHUNK], accepted[ENGINE_CHUNK];
    Lanes x[2]; /* a wave's lanes, and the next wave's */
    uint8_t active[2][ENGINE_CHUNK]; /* the cases of a wave (indices in the chunk), and of the next */
    const View q = f[E_Q], p = f[E_P], drafts = f[E_DRAFTS];
    int n = (int)(hi - lo), m = n;
    /* 0. padding everywhere (PAD is all ones): the emitted drafts after the token and the draw slots after the
       final draw keep it */
    memset(records, 0xFF, (size_t)n * VERIFY_WORDS * sizeof records[0]);
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        uint64_t seed = AT(f[E_SEED], uint64_t, i, 0, 0);
        k0[c] = (uint32_t)seed;
        k1[c] = (uint32_t)(seed >> 32);
        generation[c] = (uint32_t)AT(f[E_GENERATION], uint64_t, i, 0, 0);
        rnd[c] = (uint32_t)AT(f[E_ROUND], uint64_t, i, 0, 0);
        anchor[c] = (uint32_t)AT(f[E_ANCHOR], uint64_t, i, 0, 0);
        depth[c] = (int32_t)AT(f[E_DEPTH], int64_t, i, 0, 0);
        accepted[c] = 0;
        active[0][c] = (uint8_t)c;
        lane(&x[0], c, anchor[c], rnd[c], generation[c], k0[c], k1[c]);
    }
    /* 1, 2. the acceptance draws the round consumes, and their tests, in waves: wave k draws position k of
       every case that accepted positions 0 .. k - 1 and has k < K (independent draws, all the wave's lanes at
       once), then tests them: accept iff u32 q(x) < p(x) 2^32 (both below 2^57). A case leaves at its first
       rejection or after K accepts; accepted counts its accepts. The draw's slot k of the record (domain,
       position, u32, decision, token) and the emitted draft k (a rejected one is the token's slot, written
       over in 5) are written here */
    for (int k = 0; k < KMAX && m > 0; k++) {
        Lanes *now = &x[k & 1], *next = &x[~k & 1];
        const uint8_t *wave = active[k & 1];
        uint8_t *stay = active[~k & 1];
        for (int l = 0; l < m; l++) now->c3[l] = ACCEPT << 24;
        philox_keyed_lanes(now->c0, now->c1, now->c2, now->c3, now->k0, now->k1, m);
        int kept = 0;
        for (int l = 0; l < m; l++) {
            int c = wave[l];
            ptrdiff_t i = lo + c;
            uint32_t u32 = now->c0[l], *rec = records + c * VERIFY_WORDS, *d = rec + 4 + KMAX + 5 * k;
            int64_t draft = AT(drafts, int64_t, i, k, 0);
            int accept = (uint64_t)u32 * AT(q, uint64_t, i, k, draft) < AT(p, uint64_t, i, k, draft) << 32;
            rec[2 + k] = (uint32_t)draft;
            d[0] = ACCEPT;
            d[1] = anchor[c] + (uint32_t)k;
            d[2] = u32;
            d[3] = accept ? D_ACCEPT : D_REJECT;
            d[4] = (uint32_t)draft;
            accepted[c] = k + accept;
            /* the next wave's lane at kept, taken only if the case stays */
            stay[kept] = (uint8_t)c;
            lane(next, kept, anchor[c] + (uint32_t)k + 1, rnd[c], generation[c], now->k0[l], now->k1[l]);
            kept += accept & (k + 1 < depth[c]);
        }
        m = kept;
    }
    /* 3. the final draws at anchor + accepted (mod 2^32), every case's at once */
    for (int c = 0; c < n; c++) lane(&x[0], c, anchor[c] + (uint32_t)accepted[c], rnd[c], generation[c], k0[c], k1[c]);
    for (int c = 0; c < n; c++) x[0].c3[c] = CORRECTION << 24;
    philox_keyed_lanes(x[0].c0, x[0].c1, x[0].c2, x[0].c3, x[0].k0, x[0].k1, n);
    /* 4. the picks, in a pass of their own (the next case's loads need not wait for this case's record): from
       the bonus row p_{K+1} after K accepts, else the residual max(p - q, 0) at the rejection; the q row is
       read at the rejection only (row K does not exist when K = KMAX): masked to zero after K accepts (full as
       a mask in arithmetic, not a branch: it is about as often true as false). The token is the first v with
       C_v 2^32 > u32 R, 0 if none. C is nondecreasing, so the first such v is the number of v with
       C_v 2^32 <= u32 R, that is C_v <= floor(u32 R / 2^32) (C_v an integer): 32-bit sums and compares (C_v
       and R are at most 2^24), no shift of each C_v */
    uint32_t tokens[ENGINE_CHUNK];
    for (int c = 0; c < n; c++) {
        ptrdiff_t i = lo + c;
        int q_row = accepted[c] < KMAX ? accepted[c] : KMAX - 1;
        uint32_t total = 0, q_mask = (uint32_t)(accepted[c] == depth[c]) - 1, cumulative[VMAX];
        for (int v = 0; v < VMAX; v++) {
            uint32_t pv = (uint32_t)AT(p, uint64_t, i, accepted[c], v);
            uint32_t qv = (uint32_t)AT(q, uint64_t, i, q_row, v) & q_mask;
            total += (pv - qv) & -(uint32_t)(pv > qv); /* a mask, not a branch: the sign is a coin toss */
            cumulative[v] = total;
        }
        uint32_t threshold = (uint32_t)(((uint64_t)x[0].c0[c] * total) >> 32), below = 0;
        for (int v = 0; v < VMAX; v++) below += cumulative[v] <= threshold;
        tokens[c] = below < VMAX ? below : 0;
    }
    /* 5. the record's last fields (accumulated.verification_record's layout) */
    for (int c = 0; c < n; c++) {
        uint32_t *rec = records + c * VERIFY_WORDS, final_u32 = x[0].c0[c];
        int full = accepted[c] == depth[c], tested = accepted[c] + 1 - full;
        uint32_t token = tokens[c], *d = rec + 4 + KMAX + 5 * tested;
        rec[0] = (uint32_t)accepted[c];
        rec[1] = (uint32_t)accepted[c] + 1;
        rec[2 + accepted[c]] = token; /* the emitted token, after the accepted drafts */
        rec[3 + KMAX] = (uint32_t)tested + 1;
        d[0] = CORRECTION; /* the final draw's slot, after the tested ones */
        d[1] = anchor[c] + (uint32_t)accepted[c];
        d[2] = final_u32;
        d[3] = D_CORRECTION + (uint32_t)full; /* D_BONUS after K accepts */
        d[4] = token;
    }
}

#endif
