/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_staging.c — the remote-restore staging pool (src/cold/staging.c): owner validation of
 * every field, backpressure when slots or bytes run out (never queued), pins (reader, transfer,
 * promotion) and recycle only at zero pins, expiry fencing the token (late transfer completion
 * and late ACK ignored and counted), expiry waiting for the terminal transport state and the
 * promotion pin, checksum failure at ready, and occupancy back to zero.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cold/staging.h"
#include "kvmesh.h"

static uint8_t MEM[64 * 1024];

static staging_expect_t expect(uint64_t len, uint64_t sum)
{
    staging_expect_t e;
    memset(&e, 0, sizeof(e));
    e.namespace_hash = 7;
    e.owner.b[0] = 1;
    e.route_version = 3;
    e.locator_fp = 99;
    e.length = len;
    e.checksum = sum;
    return e;
}

static staging_pool_t *pool(uint64_t bytes, uint32_t slots)
{
    staging_pool_t *p = NULL;
    assert_int_equal(staging_new(&p, MEM, bytes, slots), 0);
    return p;
}

/* acquire + ready: a STAGED slot with reader and transfer pins. */
static staging_handle_t stage(staging_pool_t *p, uint64_t len, uint64_t deadline)
{
    staging_expect_t e = expect(len, 42);
    staging_handle_t h;
    assert_int_equal(staging_acquire(p, &e, &e, &h), 0);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FILLING);
    assert_int_equal(staging_ready(p, &h, 42, deadline), 0);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_STAGED);
    assert_true(h.token != 0);
    return h;
}

static void assert_empty(staging_pool_t *p)
{
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.slots_used, 0);
    assert_int_equal(st.bytes_used, 0);
    assert_int_equal(staging_check(p), 0);
}

static void test_validation(void **state)
{
    (void)state;
    staging_pool_t *p = pool(4096, 4);
    staging_expect_t want = expect(100, 5), have;
    staging_handle_t h;
    for (int f = 0; f < 6; f++) {
        have = want;
        switch (f) {
        case 0:
            have.namespace_hash++;
            break;
        case 1:
            have.owner.b[3] = 9;
            break;
        case 2:
            have.route_version++;
            break;
        case 3:
            have.locator_fp++;
            break;
        case 4:
            have.length++;
            break;
        default:
            have.checksum++;
            break;
        }
        assert_int_equal(staging_acquire(p, &want, &have, &h), KVMESH_ECONFLICT);
    }
    static const char *const fields[] = {"namespace", "owner",  "version",
                                         "locator",   "length", "checksum"};
    have = want;
    have.checksum++;
    staging_acquire(p, &want, &have, &h);
    assert_non_null(strstr(kvmesh_last_error(), fields[5]));
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.rejected, 7);
    assert_int_equal(st.acquired, 0);
    want.length = 8192;
    assert_int_equal(staging_acquire(p, &want, &want, &h), KVMESH_ETOOBIG);
    assert_empty(p);
    staging_free(p, true);
}

static void test_backpressure(void **state)
{
    (void)state;
    staging_pool_t *p = pool(4096, 3);
    staging_handle_t a = stage(p, 1000, 100), b = stage(p, 1000, 100), c = stage(p, 1000, 100);
    staging_expect_t e = expect(10, 42);
    staging_handle_t h;
    /* no slot */
    assert_int_equal(staging_acquire(p, &e, &e, &h), STAGING_EBACKPRESSURE);
    assert_non_null(strstr(kvmesh_last_error(), "saturated"));
    bool ok;
    assert_int_equal(staging_ack(p, a.token, &ok), 0);
    assert_true(ok);
    assert_int_equal(staging_transfer_done(p, a.token, &ok), 0);
    assert_true(ok);
    assert_int_equal(staging_state_of(p, a.slot), STAGING_FREE);
    /* a slot but not the bytes (3 * 1024 used of 4096) */
    e.length = 1000;
    assert_int_equal(staging_acquire(p, &e, &e, &h), 0); /* first fit: the freed range */
    assert_int_equal(staging_abort(p, h.slot), 0);
    e.length = 1100; /* two 1024-byte gaps, none contiguous enough */
    assert_int_equal(staging_acquire(p, &e, &e, &h), STAGING_EBACKPRESSURE);
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.backpressure, 2);
    assert_int_equal(st.slots_used, 2);
    for (int i = 0; i < 2; i++) {
        staging_handle_t x = i ? c : b;
        assert_int_equal(staging_transfer_done(p, x.token, &ok), 0);
        assert_int_equal(staging_ack(p, x.token, &ok), 0);
    }
    assert_empty(p);
    assert_int_equal(staging_acquire(p, &e, &e, &h), 0); /* room again */
    assert_int_equal(staging_abort(p, h.slot), 0);
    assert_empty(p);
    staging_free(p, true);
}

static void test_pins_and_repeats(void **state)
{
    (void)state;
    staging_pool_t *p = pool(8192, 4);
    staging_handle_t h = stage(p, 500, 100);
    bool ok;
    uint32_t r, t, pr;
    assert_int_equal(staging_promote_pin(p, h.token), 0);
    assert_int_equal(staging_transfer_done(p, h.token, &ok), 0);
    assert_true(ok);
    assert_int_equal(staging_transfer_done(p, h.token, &ok), 0); /* repeat: ignored */
    assert_false(ok);
    assert_int_equal(staging_ack(p, h.token, &ok), 0);
    assert_true(ok);
    staging_pins(p, h.slot, &r, &t, &pr);
    assert_int_equal(r + t, 0);
    assert_int_equal(pr, 1);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_STAGED); /* promotion still holds it */
    assert_int_equal(staging_promote_unpin(p, h.slot), 0);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FREE);
    assert_int_equal(staging_ack(p, h.token, &ok), 0); /* after recycle: ignored */
    assert_false(ok);
    /* a new use of the same slot has a new token; the old one still applies nothing */
    staging_handle_t h2 = stage(p, 500, 100);
    assert_int_equal(h2.slot, h.slot);
    assert_true(h2.token != h.token);
    assert_int_equal(staging_transfer_done(p, h.token, &ok), 0);
    assert_false(ok);
    staging_pins(p, h2.slot, &r, &t, &pr);
    assert_int_equal(t, 1);
    assert_int_equal(staging_transfer_done(p, 12345u << 16, &ok), KVMESH_EINVAL); /* never issued */
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.late_completions, 2);
    assert_int_equal(st.late_acks, 1);
    assert_int_equal(staging_transfer_done(p, h2.token, &ok), 0);
    assert_int_equal(staging_ack(p, h2.token, &ok), 0);
    assert_empty(p);
    staging_free(p, true);
}

static void test_expiry_fences(void **state)
{
    (void)state;
    staging_pool_t *p = pool(8192, 4);
    staging_handle_t h = stage(p, 700, 100), keep = stage(p, 700, 500);
    bool ok;
    assert_int_equal(staging_expire(p, 99, 8), 0);
    assert_int_equal(staging_promote_pin(p, h.token), 0); /* promotion overlapping expiry */
    assert_int_equal(staging_expire(p, 100, 8), 1);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FENCED);
    assert_int_equal(staging_state_of(p, keep.slot), STAGING_STAGED);
    assert_int_equal(staging_promote_pin(p, h.token), KVMESH_ECANCELED); /* no new promotion */
    /* late transfer and late ACK with the fenced token: ignored */
    assert_int_equal(staging_transfer_done(p, h.token, &ok), 0);
    assert_false(ok);
    assert_int_equal(staging_ack(p, h.token, &ok), 0);
    assert_false(ok);
    uint32_t pend[4];
    assert_int_equal(staging_fenced_pending(p, pend, 4), 1);
    assert_int_equal(pend[0], h.slot);
    /* the transport is terminal, but promotion still pins: not recycled */
    assert_int_equal(staging_transfer_terminal(p, h.slot), 0);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FENCED);
    assert_int_equal(staging_fenced_pending(p, pend, 4), 0);
    assert_int_equal(staging_check(p), 0);
    assert_int_equal(staging_promote_unpin(p, h.slot), 0);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FREE);
    assert_int_equal(staging_transfer_terminal(p, h.slot), 0); /* idempotent */
    /* expiry without promotion: waits only for the transport */
    assert_int_equal(staging_expire(p, 600, 8), 1);
    assert_int_equal(staging_state_of(p, keep.slot), STAGING_FENCED);
    assert_int_equal(staging_transfer_terminal(p, keep.slot), 0);
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.expiries, 2);
    assert_int_equal(st.late_completions, 1);
    assert_int_equal(st.late_acks, 1);
    assert_int_equal(st.recycled, 2);
    assert_empty(p);
    /* expired after the transfer completed (only the reader lease was left): recycled at once */
    staging_handle_t q = stage(p, 10, 700);
    assert_int_equal(staging_transfer_done(p, q.token, &ok), 0);
    assert_int_equal(staging_expire(p, 700, 8), 1);
    assert_int_equal(staging_state_of(p, q.slot), STAGING_FREE);
    assert_empty(p);
    staging_free(p, true);
}

static void test_checksum_and_abort(void **state)
{
    (void)state;
    staging_pool_t *p = pool(4096, 2);
    staging_expect_t e = expect(300, 42);
    staging_handle_t h;
    assert_int_equal(staging_acquire(p, &e, &e, &h), 0);
    uint64_t off, len;
    uint8_t *b = staging_buf(p, h.slot, &off, &len);
    assert_ptr_equal(b, MEM + off);
    assert_int_equal(len, 300);
    assert_int_equal(staging_ready(p, &h, 41, 10), KVMESH_ECHECKSUM);
    assert_int_equal(staging_state_of(p, h.slot), STAGING_FREE);
    assert_int_equal(staging_abort(p, h.slot), KVMESH_EINVAL);
    staging_stats_t st;
    staging_get_stats(p, &st);
    assert_int_equal(st.checksum_failures, 1);
    assert_empty(p);
    staging_pool_t *q = NULL;
    assert_int_equal(staging_new(&q, MEM, 4096, 0), KVMESH_EINVAL);
    assert_null(q);
    staging_free(NULL, true);
    staging_free(p, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),         cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_pins_and_repeats),   cmocka_unit_test(test_expiry_fences),
        cmocka_unit_test(test_checksum_and_abort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
