/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bufpool.c — the RPC endpoint's message buffer pool (net/bufpool.h): a returned buffer is
 * handed out again for its class, sizes outside the classes are never cached, the per-class and
 * byte caps free what does not fit, buffers stay plain malloc blocks both ways, and clearing
 * frees everything held.
 */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/bufpool.h"

static void test_reuse_by_class(void **state)
{
    (void)state;
    struct bufpool p;
    bufpool_init(&p, 64u << 20);
    void *a = bufpool_get(&p, 256u << 10);
    assert_non_null(a);
    assert_true(malloc_usable_size(a) >= (256u << 10));
    memset(a, 1, 256u << 10);
    assert_int_equal(p.st.misses, 1);
    bufpool_put(&p, a);
    assert_int_equal(p.st.cached_bufs, 1);
    assert_true(p.st.cached_bytes >= (256u << 10));
    /* any size of the same class (129 KiB .. 256 KiB) gets it back */
    void *b = bufpool_get(&p, (200u << 10));
    assert_ptr_equal(a, b);
    assert_int_equal(p.st.hits, 1);
    assert_int_equal(p.st.cached_bufs, 0);
    assert_int_equal(p.st.cached_bytes, 0);
    /* a larger class does not */
    bufpool_put(&p, b);
    void *c = bufpool_get(&p, (256u << 10) + 1);
    assert_ptr_not_equal(c, a);
    assert_true(malloc_usable_size(c) >= (512u << 10));
    assert_int_equal(p.st.misses, 2);
    free(c); /* a pooled buffer is a plain malloc block */
    bufpool_clear(&p);
    assert_int_equal(p.st.cached_bufs, 0);
    assert_int_equal(p.st.cached_bytes, 0);
}

static void test_out_of_range_not_cached(void **state)
{
    (void)state;
    struct bufpool p;
    bufpool_init(&p, 256u << 20);
    void *small = bufpool_get(&p, 100);
    void *huge = bufpool_get(&p, (size_t)(BUFPOOL_MAX_BYTES * 2));
    assert_non_null(small);
    assert_non_null(huge);
    assert_int_equal(p.st.misses + p.st.hits, 0); /* not pooled sizes */
    bufpool_put(&p, small);
    bufpool_put(&p, huge);
    bufpool_put(&p, NULL);
    assert_int_equal(p.st.cached_bufs, 0);
    assert_int_equal(p.st.dropped, 0);
    /* a foreign malloc block of a pooled size is taken (classed down by its usable size) */
    void *f = malloc(300u << 10);
    bufpool_put(&p, f);
    assert_int_equal(p.st.cached_bufs, 1);
    assert_ptr_equal(bufpool_get(&p, 256u << 10), f);
    free(f);
    bufpool_clear(&p);
}

static void test_caps(void **state)
{
    (void)state;
    struct bufpool p;
    /* per class: BUFPOOL_PER_CLASS buffers at most */
    bufpool_init(&p, 256u << 20);
    void *v[BUFPOOL_PER_CLASS + 2];
    for (int i = 0; i < BUFPOOL_PER_CLASS + 2; i++)
        v[i] = bufpool_get(&p, 64u << 10);
    for (int i = 0; i < BUFPOOL_PER_CLASS + 2; i++)
        bufpool_put(&p, v[i]);
    assert_int_equal(p.st.cached_bufs, BUFPOOL_PER_CLASS);
    assert_int_equal(p.st.dropped, 2);
    bufpool_clear(&p);
    /* bytes: a 1 MiB cap holds one 512 KiB buffer and one 256 KiB one, not a second 512 KiB */
    bufpool_init(&p, 1u << 20);
    void *a = bufpool_get(&p, 512u << 10), *b = bufpool_get(&p, 512u << 10);
    void *c = bufpool_get(&p, 256u << 10);
    bufpool_put(&p, a);
    bufpool_put(&p, b);
    bufpool_put(&p, c);
    assert_int_equal(p.st.cached_bufs, 2);
    assert_int_equal(p.st.dropped, 1);
    assert_true(p.st.cached_bytes <= (1u << 20));
    bufpool_clear(&p);
    /* cap 0: nothing is kept */
    bufpool_init(&p, 0);
    a = bufpool_get(&p, 128u << 10);
    bufpool_put(&p, a);
    assert_int_equal(p.st.cached_bufs, 0);
    assert_int_equal(p.st.dropped, 1);
    a = bufpool_get(&p, 128u << 10);
    assert_int_equal(p.st.hits, 0);
    bufpool_put(&p, a);
    bufpool_clear(&p);
}

static void test_protobuf_allocator(void **state)
{
    (void)state;
    struct bufpool p;
    bufpool_init(&p, 16u << 20);
    void *a = bufpool_pb_alloc(&p, 0); /* protobuf-c may ask for 0 bytes */
    assert_non_null(a);
    bufpool_pb_free(&p, a);
    void *b = bufpool_pb_alloc(&p, 70u << 10);
    bufpool_pb_free(&p, b);
    assert_ptr_equal(bufpool_pb_alloc(&p, 100u << 10), b);
    free(b);
    bufpool_clear(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_by_class),
        cmocka_unit_test(test_out_of_range_not_cached),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_protobuf_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
