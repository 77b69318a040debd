/* SPDX-License-Identifier: Apache-2.0 */
/* Compiles and runs the documented example program (examples/example_basic.c, docs/api.md) as
 * the test itest_api_example. */
#include "../../examples/example_basic.c"
