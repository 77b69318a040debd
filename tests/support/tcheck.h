/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcheck.h — the non-fatal check of the integration tests that count their failures and go on
 * (header-only): on failure it says where, what and why (a printf-style message), with the
 * library's last error, and adds one to the caller's counter; the test ends with that count.
 *
 * A test defines its own CHECK on top of it, e.g.
 *   #define CHECK(cond, ...) TCHECK_SOFT(cond, failures, __VA_ARGS__)
 */
#ifndef KVMESH_TESTS_SUPPORT_TCHECK_H
#define KVMESH_TESTS_SUPPORT_TCHECK_H

#include <stdio.h>

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

#endif
