/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_env_clock.c — the host clock helper (env/clock.h): ns and ms readings agree and never go
 * back, elapsed milliseconds saturate at 0 for a start in the future, and timed-wait deadlines
 * are normalized and lie the asked milliseconds ahead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "env/clock.h"

static void test_mono(void **state)
{
    (void)state;
    for (int i = 0; i < 1000; i++) {
        uint64_t a = env_clock_mono_ns();
        uint64_t m = env_clock_mono_ms();
        uint64_t b = env_clock_mono_ns();
        assert_true(a <= b);
        assert_true(m >= a / 1000000u && m <= b / 1000000u);
    }
    uint64_t start = env_clock_mono_ms();
    uint64_t since = env_clock_since_ms(start);
    assert_true(env_clock_mono_ms() - start >= since);
    assert_int_equal(env_clock_since_ms(env_clock_mono_ms() + 60000), 0);
    assert_true(env_clock_since_ms(0) >= start);
}

static void test_wall_and_after(void **state)
{
    (void)state;
    uint64_t w0 = env_clock_ns(CLOCK_REALTIME) / 1000000u;
    uint64_t w = env_clock_wall_ms();
    assert_true(w >= w0);
    assert_true(w > 1600000000000ull); /* after 2020: a Unix time in ms, not seconds */
    static const uint64_t ms[] = {0, 1, 999, 1000, 1001, 123456};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
        uint64_t before = env_clock_ns(CLOCK_REALTIME);
        struct timespec ts;
        env_clock_after(CLOCK_REALTIME, ms[i], &ts);
        uint64_t after = env_clock_ns(CLOCK_REALTIME);
        assert_true(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
        uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        assert_true(at >= before + ms[i] * 1000000ull);
        assert_true(at <= after + ms[i] * 1000000ull);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mono),
        cmocka_unit_test(test_wall_and_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
