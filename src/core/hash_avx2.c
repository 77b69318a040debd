/* SPDX-License-Identifier: Apache-2.0 */
/* hash_avx2.c — XXH3-64 with AVX2 (this file alone is compiled with -mavx2; CMakeLists.txt). */
#define KVM_HASH_VARIANT      kvm_hash_ops_avx2
#define KVM_HASH_VARIANT_NAME "avx2"
#if defined(__x86_64__) || defined(__i386__) /* elsewhere hash_fast.c uses the library */
#include "core/hash_variant.h"
#endif
