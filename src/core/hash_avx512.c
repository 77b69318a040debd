/* SPDX-License-Identifier: Apache-2.0 */
/* hash_avx512.c — XXH3-64 with AVX-512F (this file alone is compiled with -mavx512f;
 * CMakeLists.txt). */
#define KVM_HASH_VARIANT      kvm_hash_ops_avx512
#define KVM_HASH_VARIANT_NAME "avx512"
#if defined(__x86_64__) || defined(__i386__) /* elsewhere hash_fast.c uses the library */
#include "core/hash_variant.h"
#endif
