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
 * a pass at once, vectorized: philox_keyed_word0 and wave_draws, four lanes at a time in registers), and no pass takes a branch that depends on one case (each
 * would be mispredicted about once a case, at a cost near a Philox block's):
 *   0. the records are filled with padding, then the fields a pass knows are written over it;
 *   1, 2. the acceptance draws the round consumes and their tests, in waves: wave k draws position k of every
 *      case still accepting (independent draws), then tests them, writes their draw slots and emitted drafts,
 *      and lists the cases that accept and have a next position (without a branch): the next wave's, whose
 *      draws gather their counters and keys from the case arrays by that list. Only consumed draws are computed: 2.3 a case on the stream against 3 below K (bench/RESULTS.md,
 *      issue #24, "The engine fused with the stream");
 *   3. the final draws at anchor + accepted;
 *   4. the picks (the first count of the residual's, or the bonus row's, above the final draw's threshold), in
 *      SSE2 where the compiler targets it (pick_sse2; pick_portable elsewhere);
 *   5. the record's last fields.
 * bench/RESULTS.md, issue #24, "the engine in SIMD", has what each step gave, and what was tried and dropped. */
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
/* Lanes of a pass are computed in whole groups of LANE_GROUP: philox_keyed_word0 and wave_draws take four 32-bit
 * lanes at a time (SSE2). The lanes past the draws (at most three: zero, or stale cases of the chunk; their words
 * never read) are computed too. */
#define LANE_GROUP 4
#define LANES_ROUND(m) (((m) + LANE_GROUP - 1) / LANE_GROUP * LANE_GROUP)
#if ENGINE_CHUNK % LANE_GROUP != 0
#error "a chunk's lanes must fill whole groups"
#endif

/* A strided view: element [i, j, v] at base + i * s[0] + j * s[1] + v * s[2] (bytes). */
typedef struct {
    const char *base;
    ptrdiff_t s[3];
} View;

#define AT(view, T, i, j, v) (*(const T *)((view).base + (i) * (view).s[0] + (j) * (view).s[1] + (v) * (view).s[2]))

/* The engine's inputs, in the order of verification_records' arguments. */
enum { E_SEED, E_GENERATION, E_ROUND, E_ANCHOR, E_DEPTH, E_Q, E_P, E_DRAFTS, E_INPUTS };

/* Word 0 of the acceptance draws of a wave after the first, into u[l]: lane l the draw of case c = wave[l] at
 * (anchor[c] + k, rnd[c], generation[c], ACCEPT << 24) under (k0[c], k1[c]); n a multiple of 4 (the entries of
 * wave past its cases are stale cases of the chunk, their words never read). Each group of four lanes gathered
 * from the case arrays straight into registers (no lane arrays written and read again) and run through
 * philox_x4; plain C, a lane at a time, where there is no SSE2. */
static inline void wave_draws(const uint8_t *wave, int n, uint32_t k, const uint32_t *anchor, const uint32_t *rnd,
                              const uint32_t *generation, const uint32_t *k0, const uint32_t *k1, uint32_t *u) {
#if PHILOX_SIMD
    const __m128i domain = _mm_set1_epi32((int)(ACCEPT << 24)), step = _mm_set1_epi32((int)k);
    for (int l = 0; l < n; l += 4) {
        int a = wave[l], b = wave[l + 1], c = wave[l + 2], d = wave[l + 3];
#define GATHER(field) _mm_set_epi32((int)(field)[d], (int)(field)[c], (int)(field)[b], (int)(field)[a])
        __m128i x[4] = {_mm_add_epi32(GATHER(anchor), step), GATHER(rnd), GATHER(generation), domain};
        philox_x4(x, GATHER(k0), GATHER(k1), 1);
#undef GATHER
        _mm_storeu_si128((__m128i *)(u + l), x[0]);
    }
#else
    for (int l = 0; l < n; l++) {
        int c = wave[l];
        uint32_t x[4] = {anchor[c] + k, rnd[c], generation[c], ACCEPT << 24};
        philox(x, k0[c], k1[c]);
        u[l] = x[0];
    }
#endif
}

/* The pick of one case (pass 4 of verify_chunk): the token from the counts p_row (p of the row the final draw is
 * at) less q_row masked by q_mask (all ones at a rejection, zero after K accepts), and the final draw u32: the
 * number of v whose cumulative residual C_v is at most floor(u32 R / 2^32) (R the residual's total), 0 if every
 * v is. Two forms of one rule: pick_portable, plain C over rows of any stride (bytes between counts), and
 * pick_sse2, SSE2 over rows of 8 consecutive counts (the stream's), where the compiler targets it (every x86-64).
 * Both in 32-bit lanes: every count, C_v and R are at most 2^24 (the header's bounds), so a signed compare of
 * two of them is exact. tests/generators/test_verification_engine_native.py runs both (the portable one on rows
 * of another stride) against the NumPy engine. */
static inline uint32_t pick_portable(const uint64_t *p_row, const uint64_t *q_row, ptrdiff_t p_stride,
                                     ptrdiff_t q_stride, uint32_t q_mask, uint32_t u32) {
    uint32_t total = 0, cumulative[VMAX], below = 0;
    for (int v = 0; v < VMAX; v++) {
        uint32_t pv = (uint32_t)*(const uint64_t *)((const char *)p_row + v * p_stride);
        uint32_t qv = (uint32_t)*(const uint64_t *)((const char *)q_row + v * q_stride) & q_mask;
        total += (pv - qv) & -(uint32_t)(pv > qv); /* a mask, not a branch: the sign is a coin toss */
        cumulative[v] = total;
    }
    uint32_t threshold = (uint32_t)(((uint64_t)u32 * total) >> 32);
    for (int v = 0; v < VMAX; v++) below += cumulative[v] <= threshold;
    return below < VMAX ? below : 0;
}

#if defined(__SSE2__) && VMAX == 8 && !defined(QCONFORM_NO_SIMD)
#define PICK_SIMD 1
#include <emmintrin.h>

/* The low 32-bit words of the four u64 counts at row[0..3], as four 32-bit lanes. */
static inline __m128i low_words(const uint64_t *row) {
    __m128 a = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)row));
    __m128 b = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)(row + 2)));
    return _mm_castps_si128(_mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
}

/* C_0..C_3 of four residual counts r: the prefix sums, by two shifted additions. */
static inline __m128i prefix_sums(__m128i r) {
    r = _mm_add_epi32(r, _mm_slli_si128(r, 4));
    return _mm_add_epi32(r, _mm_slli_si128(r, 8));
}

static inline uint32_t pick_sse2(const uint64_t *p_row, const uint64_t *q_row, uint32_t q_mask, uint32_t u32) {
    __m128i mask = _mm_set1_epi32((int)q_mask);
    __m128i p0 = low_words(p_row), p1 = low_words(p_row + 4);
    __m128i q0 = _mm_and_si128(low_words(q_row), mask), q1 = _mm_and_si128(low_words(q_row + 4), mask);
    /* the residual max(p - q, 0), then C_0..C_3 and C_4..C_7 (C_3 added to the second half) */
    __m128i c0 = prefix_sums(_mm_and_si128(_mm_sub_epi32(p0, q0), _mm_cmpgt_epi32(p0, q0)));
    __m128i c1 = prefix_sums(_mm_and_si128(_mm_sub_epi32(p1, q1), _mm_cmpgt_epi32(p1, q1)));
    c1 = _mm_add_epi32(c1, _mm_shuffle_epi32(c0, 0xFF));
    uint32_t total = (uint32_t)_mm_cvtsi128_si32(_mm_shuffle_epi32(c1, 0xFF));
    __m128i threshold = _mm_set1_epi32((int)(uint32_t)(((uint64_t)u32 * total) >> 32));
    /* C is nondecreasing: the v with C_v above the threshold are the last ones, and bit v of above is set for
       each; the count at most the threshold is its number of trailing zeros (8 when none is above) */
    unsigned above = (unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(c0, threshold))) |
                     (unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(c1, threshold))) << 4;
    uint32_t below = (uint32_t)__builtin_ctz(above | 1u << VMAX);
    return below < VMAX ? below : 0;
}
#else
#define PICK_SIMD 0
#endif

/* Asks for the cache lines of one record (VERIFY_WORDS words at rec) to be brought in, to be written soon: a hint,
 * it changes no value (a no-op where the compiler has no __builtin_prefetch). The fused path asks for each case's
 * record as the stream makes the case, some 25 us before the engine writes it: the record buffer was last
 * written a block ago and is out of the core's caches, and its misses cost the engine about a fifth of its
 * time (bench/RESULTS.md, issue #24, "the engine in SIMD"); a prefetch of a whole group's records at once before
 * the group brings back only about a third of that (too many at once). */
static inline void record_prefetch(const uint32_t *rec) {
#if defined(__GNUC__)
    const char *at = (const char *)rec;
    for (size_t b = 0; b < VERIFY_WORDS * sizeof *rec; b += 64) __builtin_prefetch(at + b, 1, 3);
    __builtin_prefetch(at + VERIFY_WORDS * sizeof *rec - 1, 1, 3); /* the last line, where the record starts late in its first */
#else
    (void)rec;
#endif
}

/* The records of cases lo .. hi - 1 (hi - lo <= ENGINE_CHUNK) of the views f[E_INPUTS], written whole at
 * records (VERIFY_WORDS words a case). Every depth is in 1 .. KMAX and every draft below K is below VMAX
 * (the caller checks, or made them); the positions from K on are never read. Inlined where it is called, so
 * that the fused path's strides, constants there, fold into its addresses. */
static inline __attribute__((always_inline)) void verify_chunk(ptrdiff_t lo, ptrdiff_t hi, const View *f, uint32_t *records) {
    /* the cases, one array a field: anchor, round, generation and the key are also wave 0's lanes and, with the
       final positions, the final draws' (the lanes past the last case, at most three, zero) */
    uint32_t k0[ENGINE_CHUNK], k1[ENGINE_CHUNK], generation[ENGINE_CHUNK], rnd[ENGINE_CHUNK], anchor[ENGINE_CHUNK];
    uint32_t final_position[ENGINE_CHUNK], final_u32[ENGINE_CHUNK];
    int32_t depth[ENGINE_CHUNK], accepted[ENGINE_CHUNK];
    uint32_t u[ENGINE_CHUNK]; /* a wave's draws, lane by lane */
    uint8_t active[2][ENGINE_CHUNK] = {{0}}; /* the cases of a wave (indices in the chunk), and of the next */
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
        active[0][c] = (uint8_t)c;
    }
    for (int c = n; c < LANES_ROUND(n); c++) k0[c] = k1[c] = generation[c] = rnd[c] = anchor[c] = final_position[c] = 0;
    /* 1, 2. the acceptance draws the round consumes, and their tests, in waves: wave k draws position k of
       every case that accepted positions 0 .. k - 1 and has k < K (independent draws, all the wave's lanes at
       once), then tests them: accept iff u32 q(x) < p(x) 2^32 (both below 2^57). A case leaves at its first
       rejection or after K accepts; accepted counts its accepts. The draw's slot k of the record (domain,
       position, u32, decision, token) and the emitted draft k (a rejected one is the token's slot, written
       over in 5) are written here */
    /* unrolled (K <= 5 waves), so that each copy has its wave's arrays and slot offsets as constants: the loop's
       pointers no longer spill to the stack (about 4% of the engine, bench/RESULTS.md, issue #24, "the engine
       in SIMD") */
#pragma GCC unroll 8
    for (int k = 0; k < KMAX && m > 0; k++) {
        const uint8_t *wave = active[k & 1];
        uint8_t *stay = active[~k & 1];
        if (k == 0) /* every case, its lanes the case arrays (a constant in wave 0's unrolled copy) */
            philox_keyed_word0(anchor, rnd, generation, ACCEPT << 24, k0, k1, LANES_ROUND(m), u);
        else
            wave_draws(wave, LANES_ROUND(m), (uint32_t)k, anchor, rnd, generation, k0, k1, u);
        int kept = 0;
        for (int l = 0; l < m; l++) {
            int c = k == 0 ? l : wave[l]; /* wave 0 is every case in order (a constant in its unrolled copy) */
            ptrdiff_t i = lo + c;
            uint32_t u32 = u[l], *rec = records + c * VERIFY_WORDS, *d = rec + 4 + KMAX + 5 * k;
            int64_t draft = AT(drafts, int64_t, i, k, 0);
            int accept = (uint64_t)u32 * AT(q, uint64_t, i, k, draft) < AT(p, uint64_t, i, k, draft) << 32;
            rec[2 + k] = (uint32_t)draft;
            d[0] = ACCEPT;
            d[1] = anchor[c] + (uint32_t)k;
            d[2] = u32;
            d[3] = accept ? D_ACCEPT : D_REJECT;
            d[4] = (uint32_t)draft;
            accepted[c] = k + accept;
            /* the case stays (at kept) if it accepts and has a next position */
            stay[kept] = (uint8_t)c;
            kept += accept & (k + 1 < depth[c]);
        }
        m = kept;
    }
    /* 3. the final draws at anchor + accepted (mod 2^32), every case's at once */
    for (int c = 0; c < n; c++) final_position[c] = anchor[c] + (uint32_t)accepted[c];
    philox_keyed_word0(final_position, rnd, generation, CORRECTION << 24, k0, k1, LANES_ROUND(n), final_u32);
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
        uint32_t q_mask = (uint32_t)(accepted[c] == depth[c]) - 1;
        const uint64_t *p_row = &AT(p, uint64_t, i, accepted[c], 0), *q_row_at = &AT(q, uint64_t, i, q_row, 0);
#if PICK_SIMD
        /* the SSE2 pick where the rows are 8 consecutive counts (the stream's always are: a constant on the fused
           path), the portable one on other strides and where there is no SSE2 */
        if (p.s[2] == sizeof(uint64_t) && q.s[2] == sizeof(uint64_t)) {
            tokens[c] = pick_sse2(p_row, q_row_at, q_mask, final_u32[c]);
            continue;
        }
#endif
        tokens[c] = pick_portable(p_row, q_row_at, p.s[2], q.s[2], q_mask, final_u32[c]);
    }
    /* 5. the record's last fields (accumulated.verification_record's layout) */
    for (int c = 0; c < n; c++) {
        uint32_t *rec = records + c * VERIFY_WORDS;
        int full = accepted[c] == depth[c], tested = accepted[c] + 1 - full;
        uint32_t token = tokens[c], *d = rec + 4 + KMAX + 5 * tested;
        rec[0] = (uint32_t)accepted[c];
        rec[1] = (uint32_t)accepted[c] + 1;
        rec[2 + accepted[c]] = token; /* the emitted token, after the accepted drafts */
        rec[3 + KMAX] = (uint32_t)tested + 1;
        d[0] = CORRECTION; /* the final draw's slot, after the tested ones */
        d[1] = anchor[c] + (uint32_t)accepted[c];
        d[2] = final_u32[c];
        d[3] = D_CORRECTION + (uint32_t)full; /* D_BONUS after K accepts */
        d[4] = token;
    }
}

#endif
