/* Philox4x32-10 (Random123; docs/rng-abi.md, R22) and the constants of the RNG ABI and the
 * accumulated streams that the two C modules of generators/ share: the verification_round input
 * stream (_accumulated_stream.c) and the exact engine with its floor (_verification_engine.c).
 * One definition, included by both; the spec's own is spec/philox.py, and both modules are held
 * to it by their tests. */
#ifndef QCONFORM_PHILOX4X32_H
#define QCONFORM_PHILOX4X32_H

#include <stdint.h>

#define KMAX 5              /* the accumulated verification_round stream's depth bound */
#define VMAX 8              /* and its vocabulary bound */
#define STREAM_KEY0 0x6E6F6371u /* STREAM_KEY: ASCII "qcon" and "acc1" read as little-endian u32 */
#define STREAM_KEY1 0x31636361u
#define ACCEPT 2u           /* the RNG ABI's domain codes */
#define CORRECTION 3u

/* Philox4x32-10: ten rounds on the counter's four 32-bit words in x, in place, the key bumped by
 * the Weyl constants between rounds. */
static inline void philox(uint32_t x[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t a = (uint64_t)0xD2511F53u * x[0];
        uint64_t b = (uint64_t)0xCD9E8D57u * x[2];
        uint32_t x1 = x[1], x3 = x[3];
        x[0] = (uint32_t)(b >> 32) ^ x1 ^ k0;
        x[1] = (uint32_t)b;
        x[2] = (uint32_t)(a >> 32) ^ x3 ^ k1;
        x[3] = (uint32_t)a;
    }
}

/* Philox4x32-10 over n lanes of counters c0..c3 under one key, in place: the rounds outside, the lanes
 * inside, so that the lanes' multiplications are independent and the compiler vectorizes them (SSE2's
 * 32 x 32 -> 64-bit multiply, two lanes an instruction, at -O3 on any x86-64: about 1.3 to 2x the scalar
 * philox above, bench/RESULTS.md, issue #24, "the engine against its floor, night"). The input stream's
 * blocks and the engine's floor. */
static inline void philox_lanes(uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3, int n, uint32_t k0,
                                uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        for (int l = 0; l < n; l++) {
            uint64_t a = (uint64_t)0xD2511F53u * c0[l];
            uint64_t b = (uint64_t)0xCD9E8D57u * c2[l];
            uint32_t x0 = (uint32_t)(b >> 32) ^ c1[l] ^ k0;
            uint32_t x2 = (uint32_t)(a >> 32) ^ c3[l] ^ k1;
            c0[l] = x0;
            c1[l] = (uint32_t)b;
            c2[l] = x2;
            c3[l] = (uint32_t)a;
        }
    }
}

#if defined(__SSE2__) && !defined(QCONFORM_NO_SIMD)
#define PHILOX_SIMD 1
#include <emmintrin.h>

/* The high and low 32 bits of the products of four lanes' words x by m: two 32 x 32 -> 64-bit multiplies (each
 * takes lanes 0 and 1 of a pair of words, spread by the unpacks), the halves gathered by two shuffles. */
static inline void mulhilo_x4(__m128i x, __m128i m, __m128i *hi, __m128i *lo) {
    __m128 low = _mm_castsi128_ps(_mm_mul_epu32(_mm_unpacklo_epi32(x, x), m));
    __m128 high = _mm_castsi128_ps(_mm_mul_epu32(_mm_unpackhi_epi32(x, x), m));
    *lo = _mm_castps_si128(_mm_shuffle_ps(low, high, _MM_SHUFFLE(2, 0, 2, 0)));
    *hi = _mm_castps_si128(_mm_shuffle_ps(low, high, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Philox4x32-10 on four lanes at once, in place: the counters' words x[0..3] (a word of four lanes a vector)
 * under the lanes' keys (k0, k1), the ten rounds of philox above held in registers from the first round to the
 * last; with word0_only (a constant where it is inlined), the last round computes word 0 alone and x[1..3] are
 * left as they were after round 9. The engine's draws (word 0 only: the other words are never read) and the floor
 * in registers (the four words; philox_floor, to compare). */
static inline void philox_x4(__m128i x[4], __m128i k0, __m128i k1, int word0_only) {
    const __m128i m0 = _mm_set1_epi32((int)0xD2511F53u), m1 = _mm_set1_epi32((int)0xCD9E8D57u);
    const __m128i w0 = _mm_set1_epi32((int)0x9E3779B9u), w1 = _mm_set1_epi32((int)0xBB67AE85u);
    __m128i ahi, alo, bhi, blo;
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 = _mm_add_epi32(k0, w0);
            k1 = _mm_add_epi32(k1, w1);
        }
        mulhilo_x4(x[2], m1, &bhi, &blo);
        if (r == 9 && word0_only) {
            x[0] = _mm_xor_si128(_mm_xor_si128(bhi, x[1]), k0);
            return;
        }
        mulhilo_x4(x[0], m0, &ahi, &alo);
        x[0] = _mm_xor_si128(_mm_xor_si128(bhi, x[1]), k0);
        x[2] = _mm_xor_si128(_mm_xor_si128(ahi, x[3]), k1);
        x[1] = blo;
        x[3] = alo;
    }
}
#else
#define PHILOX_SIMD 0
#endif

/* Output word 0 of Philox4x32-10 at n lanes' counters (c0[l], c1[l], c2[l], c3) under each lane's key (k0[l],
 * k1[l]), into u[l]; word 3 of the counter (the domain, in the engine's draws) is one for all lanes, and n is a
 * multiple of 4. The engine's draws, each under its case's seed: a pass has 4 to 64 lanes, and the ten rounds run
 * on four lanes at a time in registers (philox_x4), where philox_lanes' form (the rounds outside, every
 * word loaded and stored each round) costs up to twice as much a block on a pass of 4 or 8 lanes, its loop's
 * set-up and the round-to-round store and load then being most of a round (bench/RESULTS.md, issue #24, "the
 * engine at its floor"). Plain C, a block at a time, where there is no SSE2. */
static inline void philox_keyed_word0(const uint32_t *c0, const uint32_t *c1, const uint32_t *c2, uint32_t c3,
                                      const uint32_t *k0, const uint32_t *k1, int n, uint32_t *u) {
#if PHILOX_SIMD
    const __m128i domain = _mm_set1_epi32((int)c3);
    for (int l = 0; l < n; l += 4) {
#define PHILOX_LOAD(a) _mm_loadu_si128((const __m128i *)((a) + l))
        __m128i x[4] = {PHILOX_LOAD(c0), PHILOX_LOAD(c1), PHILOX_LOAD(c2), domain};
        philox_x4(x, PHILOX_LOAD(k0), PHILOX_LOAD(k1), 1);
#undef PHILOX_LOAD
        _mm_storeu_si128((__m128i *)(u + l), x[0]);
    }
#else
    for (int l = 0; l < n; l++) {
        uint32_t x[4] = {c0[l], c1[l], c2[l], c3};
        philox(x, k0[l], k1[l]);
        u[l] = x[0];
    }
#endif
}

#endif
