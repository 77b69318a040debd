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

/*
 * Streaming stores (core/copy.h: whole lines written to memory without a read-for-ownership and
 * without evicting the cache) of the stripes acc_copy copies, from the registers the hash folds:
 * the bytes hashed are the bytes stored, whichever side another process may be changing (an
 * owner's pages when reading, docs/performance.md "Large shm gets: streaming stores into the
 * caller's buffer"). With AVX-512 the destination only needs 4-byte alignment (malloc's 16 is
 * enough): each aligned 64-byte line joins the previous stripe's last m bytes and this stripe's
 * first 64 - m (one permute, m = dst % 64); the first stripe's head and the last one's tail, the
 * parts of partial lines, go with plain stores. With AVX2 the destination must be 32-aligned.
 * A destination the variant cannot stream to is copied with plain stores (still one pass).
 */
#if defined(__AVX512F__)
#define STREAM_ALIGN 4u
struct nt_out {
    __m512i prev;       /* the last stripe stored; its last m bytes are not written yet */
    __m512i idx;        /* permutex2var index: line = prev[64 - m..63] ++ stripe[0..63 - m] */
    unsigned char *end; /* the end of the last stripe stored */
    unsigned m;         /* dst % 64 of every stripe (a multiple of 4) */
    bool started;       /* prev holds a stripe */
};

static void nt_begin(struct nt_out *o, const unsigned char *dst)
{
    o->m = (unsigned)((uintptr_t)dst % 64);
    unsigned k = o->m / 4;
    o->idx = _mm512_and_si512(
        _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32((int)(16 - k))),
        _mm512_set1_epi32(31));
    o->started = false;
}

/* Stores stripe v at dst (the stripe's place; 64-byte line-aligned stores only). */
static inline void nt_stripe(struct nt_out *o, unsigned char *dst, __m512i v)
{
    if (o->m == 0) {
        _mm512_stream_si512((void *)dst, v);
    } else if (o->started) {
        _mm512_stream_si512((void *)(dst - o->m), _mm512_permutex2var_epi32(o->prev, o->idx, v));
    } else { /* the first stripe: its bytes up to the line boundary, plain */
        XXH_ALIGN(64) unsigned char t[XXH_STRIPE_LEN];
        _mm512_store_si512((void *)t, v);
        memcpy(dst, t, XXH_STRIPE_LEN - o->m);
    }
    o->prev = v;
    o->end = dst + XXH_STRIPE_LEN;
    o->started = true;
}

/* After the last stripe: its last m bytes (a partial line), plain. */
static void nt_end(struct nt_out *o)
{
    if (o->m == 0 || !o->started)
        return;
    XXH_ALIGN(64) unsigned char t[XXH_STRIPE_LEN];
    _mm512_store_si512((void *)t, o->prev);
    memcpy(o->end - o->m, t + XXH_STRIPE_LEN - o->m, o->m);
}

/* One stripe: loaded once into t (a register the compiler keeps; t for the hash), streamed. */
static inline void stripe_nt(struct nt_out *o, unsigned char *dst, const unsigned char *src,
                             unsigned char *t)
{
    __m512i v = _mm512_loadu_si512((const void *)src);
    nt_stripe(o, dst, v);
    _mm512_store_si512((void *)t, v);
}
#else
#define STREAM_ALIGN 32u
struct nt_out {
    unsigned m;
};

static void nt_begin(struct nt_out *o, const unsigned char *dst)
{
    o->m = (unsigned)((uintptr_t)dst % 32);
    KVM_ASSERT(o->m == 0);
}

static void nt_end(struct nt_out *o)
{
    (void)o;
}

static inline void stripe_nt(struct nt_out *o, unsigned char *dst, const unsigned char *src,
                             unsigned char *t)
{
    (void)o;
    __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(src + 32));
    _mm256_stream_si256((__m256i *)(void *)dst, a);
    _mm256_stream_si256((__m256i *)(void *)(dst + 32), b);
    _mm256_store_si256((__m256i *)(void *)t, a);
    _mm256_store_si256((__m256i *)(void *)(t + 32), b);
}
#endif

/* n stripes of src folded into acc (secret advancing by stripe) and copied to dst: with
 * streaming stores through nt (not NULL), else plain. Either way the stripe is hashed as it was
 * stored (a register, or dst from L1): a source that another process may change while it is read
 * (an owner's pages) is then hashed exactly as copied, so a torn read fails verification instead
 * of hashing bytes other than the ones the caller got. The accumulators live in a local for the
 * loop (in registers: through acc, every stripe would load and store them); restrict lets the
 * stripe's one load feed both the store and the hash. */
static void acc_copy(xxh_u64 *acc, unsigned char *restrict dst, const unsigned char *restrict src,
                     const unsigned char *secret, size_t n, struct nt_out *nt)
{
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 a[XXH_ACC_NB];
    XXH_ALIGN(64) unsigned char t[XXH_STRIPE_LEN];
    memcpy(a, acc, sizeof(a));
    for (size_t i = 0; i < n; i++) {
        const unsigned char *in = src + i * XXH_STRIPE_LEN;
        unsigned char *out = dst + i * XXH_STRIPE_LEN;
        __builtin_prefetch(in + COPY_PREFETCH, 0, 2); /* prefetcht1: never faults */
        const unsigned char *h = t;
        if (nt) {
            stripe_nt(nt, out, in, t);
        } else {
            memcpy(out, in, XXH_STRIPE_LEN);
            h = out; /* what was copied (see above) */
        }
        XXH3_accumulate_512(a, h, secret + i * XXH_SECRET_CONSUME_RATE);
    }
    memcpy(acc, a, sizeof(a));
}

/* XXH3_consumeStripes, copying to dst (NULL: src is the state's own buffer, nothing to copy). */
static void consume_copy(xxh_u64 *acc, XXH3_state_t *st, unsigned char *dst,
                         const unsigned char *src, size_t n, const unsigned char *secret,
                         struct nt_out *nt)
{
    unsigned char tmp[XXH3_INTERNALBUFFER_SIZE];
    KVM_ASSERT(n * XXH_STRIPE_LEN <= sizeof(tmp));
    unsigned char *out = dst ? dst : tmp; /* the buffer "copied" to scratch: one code path */
    nt = dst ? nt : NULL;
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
                      const unsigned char *end, const unsigned char *secret, struct nt_out *nt)
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

static void update_copy(void *state, void *dst, const void *src, size_t len, bool stream)
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
                     NULL);
        st->bufferedSize = 0;
    }
    struct nt_out ntb, *nt = NULL; /* every stripe from here on lands at out + 64 * i */
    if (stream && (uintptr_t)out % STREAM_ALIGN == 0) {
        nt_begin(&ntb, out);
        nt = &ntb;
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
    if (nt)
        nt_end(nt);
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
