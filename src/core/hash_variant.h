/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_variant.h — the body of one XXH3-64 variant (hash_impl.h): included once by hash_avx2.c
 * and once by hash_avx512.c, each compiled with its instruction set, after defining
 * KVM_HASH_VARIANT (the ops table's name) and KVM_HASH_VARIANT_NAME. xxHash's inline build picks
 * its vector code from the compiler's target macros (__AVX2__, __AVX512F__).
 */
#ifndef KVM_HASH_VARIANT
#error "define KVM_HASH_VARIANT before including hash_variant.h"
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/hash_impl.h"
#include "core/util.h"

_Static_assert(sizeof(XXH3_state_t) <= KVM_SUM_STATE_SIZE, "KVM_SUM_STATE_SIZE too small");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "XXH3_state_t alignment above 64");

static uint64_t v_oneshot(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

static void v_reset(void *state, uint64_t seed)
{
    XXH3_64bits_reset_withSeed((XXH3_state_t *)state, seed);
}

static void v_update(void *state, const void *data, size_t len)
{
    XXH3_64bits_update((XXH3_state_t *)state, data, len);
}

static uint64_t v_digest(const void *state)
{
    return XXH3_64bits_digest((const XXH3_state_t *)state);
}

/*
 * Copy + update in one pass (kvm_sum_update_copy): XXH3_update's steps (xxHash 0.8's streaming
 * state: 256-byte buffer, nbStripesSoFar, the predecessor stripe kept at the buffer's end), with
 * each stripe the update reads from the caller's input loaded once, stored to dst and folded
 * from the same registers. A source that comes from memory (another process's pages) is then
 * read once at memory speed, and the hash's arithmetic runs under the loads instead of in a pass
 * of its own. Lines COPY_PREFETCH bytes ahead are asked into L2, which keeps more of them in
 * flight than the hardware prefetcher does on its own (docs/performance.md "Large shm gets: the
 * copy and the checksum"). The state ends exactly as XXH3_update leaves it (tests/unit/
 * test_hash.c compares digests for every split).
 */
#if XXH_VERSION_NUMBER >= 800 && XXH_VERSION_NUMBER < 900
#define COPY_PREFETCH 4096u

/* One stripe stored with streaming stores (dst aligned to STREAM_ALIGN): written to memory
 * without a read-for-ownership and without evicting the cache (core/copy.h). */
#if defined(__AVX512F__)
#define STREAM_ALIGN 64u
static inline void stripe_stream(unsigned char *dst, const unsigned char *src)
{
    _mm512_stream_si512((void *)dst, _mm512_loadu_si512((const void *)src));
}
#else
#define STREAM_ALIGN 32u
static inline void stripe_stream(unsigned char *dst, const unsigned char *src)
{
    _mm256_stream_si256((__m256i *)(void *)dst,
                        _mm256_loadu_si256((const __m256i *)(const void *)src));
    _mm256_stream_si256((__m256i *)(void *)(dst + 32),
                        _mm256_loadu_si256((const __m256i *)(const void *)(src + 32)));
}
#endif

/* n stripes of src folded into acc (secret advancing by stripe) and copied to dst, with
 * streaming stores when nt and dst is aligned for them. A plain copy hashes the stripe it stored
 * (from a register or L1): a source that another process may change while it is read (an
 * owner's pages) is then hashed exactly as copied, so a torn read fails verification instead of
 * hashing bytes other than the ones the caller got. A streaming copy (writes: the source is the
 * caller's own buffer) hashes the source. The accumulators live in a local for
 * the loop (in registers: through acc, every stripe would load and store them); restrict lets
 * the stripe's one load feed both the store and the hash. */
static void acc_copy(xxh_u64 *acc, unsigned char *restrict dst, const unsigned char *restrict src,
                     const unsigned char *secret, size_t n, bool nt)
{
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 a[XXH_ACC_NB];
    memcpy(a, acc, sizeof(a));
    nt = nt && (uintptr_t)dst % STREAM_ALIGN == 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *in = src + i * XXH_STRIPE_LEN;
        __builtin_prefetch(in + COPY_PREFETCH, 0, 2); /* prefetcht1: never faults */
        const unsigned char *h = in;
        if (nt) {
            stripe_stream(dst + i * XXH_STRIPE_LEN, in);
        } else {
            memcpy(dst + i * XXH_STRIPE_LEN, in, XXH_STRIPE_LEN);
            h = dst + i * XXH_STRIPE_LEN; /* what was copied (see above) */
        }
        XXH3_accumulate_512(a, h, secret + i * XXH_SECRET_CONSUME_RATE);
    }
    memcpy(acc, a, sizeof(a));
}

/* XXH3_consumeStripes, copying to dst (NULL: src is the state's own buffer, nothing to copy). */
static void consume_copy(xxh_u64 *acc, XXH3_state_t *st, unsigned char *dst,
                         const unsigned char *src, size_t n, const unsigned char *secret, bool nt)
{
    unsigned char tmp[XXH3_INTERNALBUFFER_SIZE];
    KVM_ASSERT(n * XXH_STRIPE_LEN <= sizeof(tmp));
    unsigned char *out = dst ? dst : tmp; /* the buffer "copied" to scratch: one code path */
    size_t left = st->nbStripesPerBlock - st->nbStripesSoFar;
    if (left <= n) {
        acc_copy(acc, out, src, secret + st->nbStripesSoFar * XXH_SECRET_CONSUME_RATE, left, nt);
        XXH3_scrambleAcc(acc, secret + st->secretLimit);
        acc_copy(acc, out + left * XXH_STRIPE_LEN, src + left * XXH_STRIPE_LEN, secret, n - left,
                 nt);
        st->nbStripesSoFar = n - left;
    } else {
        acc_copy(acc, out, src, secret + st->nbStripesSoFar * XXH_SECRET_CONSUME_RATE, n, nt);
        st->nbStripesSoFar += n;
    }
}

/* Whole blocks and the last partial block of [*in, end), at least one stripe left over. */
static void long_copy(xxh_u64 *acc, XXH3_state_t *st, unsigned char **out, const unsigned char **in,
                      const unsigned char *end, const unsigned char *secret, bool nt)
{
    const size_t per = st->nbStripesPerBlock;
    size_t n = (size_t)(end - 1 - *in) / XXH_STRIPE_LEN;
    size_t k = per - st->nbStripesSoFar; /* to the current block's end (n >= per >= k) */
    KVM_ASSERT(n >= k);
    for (const unsigned char *sec = secret + st->nbStripesSoFar * XXH_SECRET_CONSUME_RATE;;
         sec = secret, k = per) {
        acc_copy(acc, *out, *in, sec, k, nt);
        XXH3_scrambleAcc(acc, secret + st->secretLimit);
        *in += k * XXH_STRIPE_LEN;
        *out += k * XXH_STRIPE_LEN;
        n -= k;
        if (n < per)
            break;
    }
    acc_copy(acc, *out, *in, secret, n, nt); /* the last partial block */
    *in += n * XXH_STRIPE_LEN;
    *out += n * XXH_STRIPE_LEN;
    st->nbStripesSoFar = n;
}

static void update_copy(void *state, void *dst, const void *src, size_t len, bool nt)
{
    XXH3_state_t *st = state;
    unsigned char *out = dst;
    const unsigned char *in = src, *const end = in + len;
    const unsigned char *secret = st->extSecret ? st->extSecret : st->customSecret;
    st->totalLen += len;
    if (st->bufferedSize + len <= XXH3_INTERNALBUFFER_SIZE) { /* small: buffered only */
        memcpy(out, in, len);
        memcpy(st->buffer + st->bufferedSize, out, len);
        st->bufferedSize += (XXH32_hash_t)len;
        return;
    }
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB]; /* on the stack, as XXH3_update */
    memcpy(acc, st->acc, sizeof(acc));
    if (st->bufferedSize) { /* complete the buffer, then consume it */
        size_t k = XXH3_INTERNALBUFFER_SIZE - st->bufferedSize;
        memcpy(out, in, k);
        memcpy(st->buffer + st->bufferedSize, out, k);
        in += k;
        out += k;
        consume_copy(acc, st, NULL, st->buffer, XXH3_INTERNALBUFFER_SIZE / XXH_STRIPE_LEN, secret,
                     false);
        st->bufferedSize = 0;
    }
    if ((size_t)(end - in) > st->nbStripesPerBlock * XXH_STRIPE_LEN) {
        long_copy(acc, st, &out, &in, end, secret, nt);
        memcpy(st->buffer + XXH3_INTERNALBUFFER_SIZE - XXH_STRIPE_LEN, in - XXH_STRIPE_LEN,
               XXH_STRIPE_LEN); /* the predecessor of the last partial stripe */
    } else if (end - in > XXH3_INTERNALBUFFER_SIZE) {
        do {
            consume_copy(acc, st, out, in, XXH3_INTERNALBUFFER_SIZE / XXH_STRIPE_LEN, secret, nt);
            in += XXH3_INTERNALBUFFER_SIZE;
            out += XXH3_INTERNALBUFFER_SIZE;
        } while (in < end - XXH3_INTERNALBUFFER_SIZE);
        memcpy(st->buffer + XXH3_INTERNALBUFFER_SIZE - XXH_STRIPE_LEN, in - XXH_STRIPE_LEN,
               XXH_STRIPE_LEN);
    }
    size_t rest = (size_t)(end - in); /* 1..256 bytes, always: buffered */
    memcpy(out, in, rest);
    memcpy(st->buffer, out, rest);
    st->bufferedSize = (XXH32_hash_t)rest;
    memcpy(st->acc, acc, sizeof(acc));
}

static void v_update_copy(void *state, void *dst, const void *src, size_t len)
{
    update_copy(state, dst, src, len, false);
}

static void v_update_copy_stream(void *state, void *dst, const void *src, size_t len)
{
    update_copy(state, dst, src, len, true);
}
#else /* another xxHash: its update after a plain copy (same result, two passes) */
static void v_update_copy(void *state, void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
    XXH3_64bits_update((XXH3_state_t *)state, dst, len);
}

static void v_update_copy_stream(void *state, void *dst, const void *src, size_t len)
{
    v_update_copy(state, dst, src, len);
}
#endif

const struct kvm_hash_ops KVM_HASH_VARIANT = {
    .name = KVM_HASH_VARIANT_NAME,
    .oneshot = v_oneshot,
    .reset = v_reset,
    .update = v_update,
    .update_copy = v_update_copy,
    .update_copy_stream = v_update_copy_stream,
    .digest = v_digest,
};
