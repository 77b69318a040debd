/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcheck.h — the checks of the integration tests (header-only), each saying on failure where and
 * what failed, with the library's last error:
 *   - TCHECK_SOFT, for the tests that count their failures and go on: a printf-style message,
 *     and one more in the caller's counter; the test ends with that count;
 *   - TCHECK_FATAL, for the in-process tests that stop at the first failure: the process exits
 *     with status 1 (its runtimes die with it; nothing outside the process to clean up).
 *
 * A test defines its own CHECK on top of one, e.g.
 *   #define CHECK(cond, ...) TCHECK_SOFT(cond, failures, __VA_ARGS__)
 *   #define CHECK(c) TCHECK_FATAL(c)
 * (tests that start processes or servers use proc.h's TPROC_CHECK, which cleans up first).
 */
#ifndef KVMESH_TESTS_SUPPORT_TCHECK_H
#define KVMESH_TESTS_SUPPORT_TCHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "kvmesh.h"

#define TCHECK_SOFT(cond, counter, ...)                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (last error: %s)\n", kvmesh_last_error());                           \
            (counter)++;                                                                           \
        }                                                                                          \
    } while (0)

#define TCHECK_FATAL(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "CHECK failed %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond,            \
                    kvmesh_last_error());                                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
