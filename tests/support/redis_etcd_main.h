/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_etcd_main.h — the cmocka main of an integration test that runs one cluster scenario
 * twice, once on a redis metadata backend and once on etcd. Owns nothing at run time: the
 * macro only defines the two cmocka cases (NAME_redis, NAME_etcd) that call RUN(false) and
 * RUN(true) (RUN takes "use etcd") and a main() running them under the given group
 * setup/teardown. Include cmocka (with setjmp.h, stdarg.h, stddef.h) before this header.
 */
#ifndef KVMESH_TESTS_REDIS_ETCD_MAIN_H
#define KVMESH_TESTS_REDIS_ETCD_MAIN_H

#include <stdbool.h>

#define KVMESH_REDIS_ETCD_MAIN(NAME, RUN, SETUP, TEARDOWN)                                         \
    static void NAME##_redis(void **state)                                                         \
    {                                                                                              \
        (void)state;                                                                               \
        RUN(false);                                                                                \
    }                                                                                              \
    static void NAME##_etcd(void **state)                                                          \
    {                                                                                              \
        (void)state;                                                                               \
        RUN(true);                                                                                 \
    }                                                                                              \
    int main(void)                                                                                 \
    {                                                                                              \
        const struct CMUnitTest tests[] = {                                                        \
            cmocka_unit_test(NAME##_redis),                                                        \
            cmocka_unit_test(NAME##_etcd),                                                         \
        };                                                                                         \
        return cmocka_run_group_tests(tests, SETUP, TEARDOWN);                                     \
    }

#endif
