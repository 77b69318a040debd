/* SPDX-License-Identifier: Apache-2.0 */
/* Bad input to the public API: every invalid handle, config, scope, key, size, buffer and
 * option returns its named error with a kvmesh_last_error() message, and nothing crashes
 * (run under ASan/UBSan in CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvmesh.h"

static kvmesh_t *kv;
static const kvmesh_scope_t good = {"t1", NULL};

#define ASSERT_ERR(call, code)                                                                     \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (code))                                                                         \
            fprintf(stderr, "%s -> %s (%s)\n", #call, kvmesh_errname(rc_), kvmesh_last_error());   \
        assert_int_equal(rc_, (code));                                                             \
        assert_true(kvmesh_last_error()[0] != 0);                                                  \
    } while (0)

static kvmesh_config_t *base_cfg(void)
{
    kvmesh_config_t *c = kvmesh_config_new();
    assert_non_null(c);
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://api_errors"), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "8388608"), 0);
    assert_int_equal(kvmesh_config_set(c, "segment_size", "8388608"), 0);
    assert_int_equal(kvmesh_config_set(c, "max_object_size", "1048576"), 0);
    return c;
}

static int setup(void **state)
{
    (void)state;
    kvmesh_config_t *c = base_cfg();
    int rc = kvmesh_open(&kv, c);
    kvmesh_config_free(c);
    if (rc)
        fprintf(stderr, "open: %s\n", kvmesh_last_error());
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    kvmesh_close(kv);
    return 0;
}

static void expect_refused(const char *field, const char *value, int open_code)
{
    kvmesh_config_t *c = base_cfg();
    int rc = kvmesh_config_set(c, field, value);
    if (rc == 0) {
        kvmesh_t *x = NULL;
        rc = kvmesh_open(&x, c);
        if (rc != open_code)
            fprintf(stderr, "%s=%s: open -> %s (%s)\n", field, value, kvmesh_errname(rc),
                    kvmesh_last_error());
        assert_int_equal(rc, open_code);
        assert_null(x);
    } else {
        assert_true(rc == KVMESH_ECONFIG || rc == KVMESH_EURL);
    }
    assert_true(kvmesh_last_error()[0] != 0);
    kvmesh_config_free(c);
}

static void test_configs(void **state)
{
    (void)state;
    kvmesh_t *x = NULL;
    ASSERT_ERR(kvmesh_open(NULL, NULL), KVMESH_EINVAL);
    kvmesh_config_t *c = base_cfg();
    ASSERT_ERR(kvmesh_config_set(c, "no_such_field", "1"), KVMESH_ECONFIG);
    ASSERT_ERR(kvmesh_config_set(c, "memory_size", "lots"), KVMESH_ECONFIG);
    ASSERT_ERR(kvmesh_config_set(c, "memory_size", "-5"), KVMESH_ECONFIG);
    ASSERT_ERR(kvmesh_config_set(c, "route_mode", "sideways"), KVMESH_ECONFIG);
    ASSERT_ERR(kvmesh_config_set(c, NULL, "1"), KVMESH_EINVAL);

    assert_int_equal(kvmesh_config_set(c, "evict_low_watermark", "0.95"), 0);
    ASSERT_ERR(kvmesh_open(&x, c), KVMESH_ECONFIG);
    assert_true(strstr(kvmesh_last_error(), "watermark") != NULL);
    kvmesh_config_free(c);

    c = base_cfg(); /* out-of-range values are refused field by field */
    ASSERT_ERR(kvmesh_config_set(c, "replicas", "0"), KVMESH_ECONFIG);
    assert_true(strstr(kvmesh_last_error(), "replicas") != NULL);
    kvmesh_config_free(c);

    /* refused by name either when set or at open */
    expect_refused("metadata_url", "gopher://nowhere", KVMESH_EURL);
    expect_refused("runtime_id", "not-hex", KVMESH_ECONFIG);
    expect_refused("listen", "nonsense", KVMESH_ECONFIG);
    expect_refused("deployment", "has/slash", KVMESH_ECONFIG);

    c = base_cfg(); /* a second deployment member with a different cluster policy */
    assert_int_equal(kvmesh_config_set(c, "shards", "77"), 0);
    ASSERT_ERR(kvmesh_open(&x, c), KVMESH_EINCOMPAT);
    assert_true(strstr(kvmesh_last_error(), "shards") != NULL);
    kvmesh_config_free(c);
    assert_null(x);
}

static void test_null_handle(void **state)
{
    (void)state;
    void *out;
    size_t n;
    bool ex;
    ASSERT_ERR(kvmesh_put(NULL, &good, "k", 1, "v", 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_get(NULL, &good, "k", 1, &out, &n), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_exists(NULL, &good, "k", 1, &ex), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_remove(NULL, &good, "k", 1), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_members(NULL, NULL, 0, &n), KVMESH_EINVAL);
    kvmesh_close(NULL);
}

static void test_scopes_and_keys(void **state)
{
    (void)state;
    kvmesh_scope_t s;
    ASSERT_ERR(kvmesh_put(kv, NULL, "k", 1, "v", 1, NULL), KVMESH_EBADTENANT);
    s = (kvmesh_scope_t){NULL, NULL};
    ASSERT_ERR(kvmesh_put(kv, &s, "k", 1, "v", 1, NULL), KVMESH_EBADTENANT);
    s = (kvmesh_scope_t){"", NULL};
    ASSERT_ERR(kvmesh_put(kv, &s, "k", 1, "v", 1, NULL), KVMESH_EBADTENANT);
    s = (kvmesh_scope_t){"a/b", NULL};
    ASSERT_ERR(kvmesh_put(kv, &s, "k", 1, "v", 1, NULL), KVMESH_EBADTENANT);
    char longt[100];
    memset(longt, 'x', sizeof(longt) - 1);
    longt[99] = 0;
    s = (kvmesh_scope_t){longt, NULL};
    ASSERT_ERR(kvmesh_put(kv, &s, "k", 1, "v", 1, NULL), KVMESH_EBADTENANT);
    s = (kvmesh_scope_t){"t1", ""};
    ASSERT_ERR(kvmesh_put(kv, &s, "k", 1, "v", 1, NULL), KVMESH_EBADDOMAIN);
    s = (kvmesh_scope_t){"t1", "bad domain"};
    ASSERT_ERR(kvmesh_get_into(kv, &s, "k", 1, NULL, 0, &(size_t){0}), KVMESH_EBADDOMAIN);

    ASSERT_ERR(kvmesh_put(kv, &good, NULL, 1, "v", 1, NULL), KVMESH_EBADKEY);
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 0, "v", 1, NULL), KVMESH_EBADKEY);
    ASSERT_ERR(kvmesh_put(kv, &good, "a\nb", 3, "v", 1, NULL), KVMESH_EBADKEY);
    char *big = calloc(1, 2000);
    memset(big, 'k', 2000);
    ASSERT_ERR(kvmesh_put(kv, &good, big, 2000, "v", 1, NULL), KVMESH_EBADKEY);
    ASSERT_ERR(kvmesh_remove(kv, &good, big, 2000), KVMESH_EBADKEY);
    free(big);
    bool ex;
    ASSERT_ERR(kvmesh_exists(kv, &good, "\x7f", 1, &ex), KVMESH_EBADKEY);
}

static void test_sizes_buffers_opts(void **state)
{
    (void)state;
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, NULL, 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, "v", 0, NULL), KVMESH_EINVAL);
    char *big = calloc(1, (1 << 20) + 1);
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, big, (1 << 20) + 1, NULL), KVMESH_ETOOBIG);
    free(big);
    kvmesh_put_opts_t o = {.replicas = 99};
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, "v", 1, &o), KVMESH_EINVAL);
    const char *bad[] = {"xyz"};
    o = (kvmesh_put_opts_t){.preferred_owners = bad, .n_preferred = 1};
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, "v", 1, &o), KVMESH_EINVAL);
    o = (kvmesh_put_opts_t){.n_preferred = 1};
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, "v", 1, &o), KVMESH_EINVAL);
    o = (kvmesh_put_opts_t){.hard_pin = true};
    ASSERT_ERR(kvmesh_put(kv, &good, "k", 1, "v", 1, &o), KVMESH_EINVAL);

    struct iovec iov[65];
    for (int i = 0; i < 65; i++)
        iov[i] = (struct iovec){"x", 1};
    ASSERT_ERR(kvmesh_putv(kv, &good, "k", 1, NULL, 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_putv(kv, &good, "k", 1, iov, 0, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_putv(kv, &good, "k", 1, iov, 65, NULL), KVMESH_EINVAL);
    iov[1].iov_base = NULL;
    ASSERT_ERR(kvmesh_putv(kv, &good, "k", 1, iov, 2, NULL), KVMESH_EINVAL);
    size_t n = 0;
    ASSERT_ERR(kvmesh_getv(kv, &good, "k", 1, iov, 2, &n), KVMESH_EINVAL);

    void *out;
    ASSERT_ERR(kvmesh_get(kv, &good, "k", 1, NULL, &n), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_get(kv, &good, "k", 1, &out, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_get_into(kv, &good, "k", 1, NULL, 10, &n), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_get_into(kv, &good, "k", 1, &n, sizeof(n), NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_exists(kv, &good, "k", 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_size(kv, &good, "k", 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_route_query(kv, &good, "k", 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_get(kv, &good, "absent", 6, &out, &n), KVMESH_ENOENT);

    ASSERT_ERR(kvmesh_register_buffer(kv, NULL, 10), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_register_buffer(kv, &n, 0), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_unregister_buffer(kv, &n), KVMESH_ENOENT);
    ASSERT_ERR(kvmesh_unregister_buffer(kv, NULL), KVMESH_EINVAL);

    ASSERT_ERR(kvmesh_batch_put(kv, &good, NULL, 3, NULL), KVMESH_EINVAL);
    kvmesh_batch_item_t it = {.key = "k", .key_len = 1, .buf = NULL, .len = 1};
    ASSERT_ERR(kvmesh_batch_put(kv, &good, &it, KVMESH_BATCH_MAX + 1, NULL), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_batch_put(kv, &good, &it, 1, NULL), KVMESH_EINVAL);
    assert_int_equal(it.rc, KVMESH_EINVAL);
    assert_int_equal(kvmesh_batch_get(kv, &good, &it, 0), 0);
    ASSERT_ERR(kvmesh_members(kv, NULL, 5, &n), KVMESH_EINVAL);
    ASSERT_ERR(kvmesh_self(kv, NULL, NULL), KVMESH_EINVAL);
}

static void test_client_only_has_no_storage(void **state)
{
    (void)state;
    kvmesh_config_t *c = kvmesh_config_new();
    assert_int_equal(kvmesh_config_set(c, "metadata_url", "memory://api_errors_client"), 0);
    assert_int_equal(kvmesh_config_set(c, "route_mode", "metadata_only"), 0);
    assert_int_equal(kvmesh_config_set(c, "memory_size", "0"), 0);
    /* the put waits for a storage member until its deadline (docs/store.md "Membership"); the
     * deadline is a multiple of the membership refresh period (lease_ttl_ms / 4), so snapshots
     * land at put deadlines: a parked put woken by one at its deadline reports the same
     * outcome as its own timer (it once failed ETIMEDOUT "deadline passed after placing 0") */
    assert_int_equal(kvmesh_config_set(c, "request_timeout_ms", "50"), 0);
    assert_int_equal(kvmesh_config_set(c, "lease_ttl_ms", "200"), 0);
    kvmesh_t *cl = NULL;
    assert_int_equal(kvmesh_open(&cl, c), 0);
    kvmesh_config_free(c);
    for (int i = 0; i < 40; i++) {
        ASSERT_ERR(kvmesh_put(cl, &good, "k", 1, "v", 1, NULL), KVMESH_EUNAVAILABLE);
        assert_true(strstr(kvmesh_last_error(), "replicas") != NULL);
        assert_true(strstr(kvmesh_last_error(), "no storage member came back") != NULL);
    }
    kvmesh_close(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_null_handle),
        cmocka_unit_test(test_scopes_and_keys),
        cmocka_unit_test(test_sizes_buffers_opts),
        cmocka_unit_test(test_client_only_has_no_storage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
