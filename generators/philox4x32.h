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

/* philox_lanes with a key of each lane's own (k0[l], k1[l]): the engine's draws, each under its case's seed. */
static inline void philox_keyed_lanes(uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3, const uint32_t *k0,
                                      const uint32_t *k1, int n) {
    for (int r = 0; r < 10; r++) {
        uint32_t w0 = 0x9E3779B9u * (uint32_t)r, w1 = 0xBB67AE85u * (uint32_t)r; /* round r's key: k + r W */
        for (int l = 0; l < n; l++) {
            uint64_t a = (uint64_t)0xD2511F53u * c0[l];
            uint64_t b = (uint64_t)0xCD9E8D57u * c2[l];
            uint32_t x0 = (uint32_t)(b >> 32) ^ c1[l] ^ (k0[l] + w0);
            uint32_t x2 = (uint32_t)(a >> 32) ^ c3[l] ^ (k1[l] + w1);
            c0[l] = x0;
            c1[l] = (uint32_t)b;
            c2[l] = x2;
            c3[l] = (uint32_t)a;
        }
    }
}

#endif
