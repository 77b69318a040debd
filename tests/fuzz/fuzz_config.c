/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config.c — libFuzzer target for the configuration file loader (kvm_config_load_yaml).
 * Any input either loads (then dumping and reloading gives the same config, and the config
 * passes the per-field table checks) or fails with KVMESH_ECONFIG and a message that starts
 * with the source name and a line number; never a crash, never a partial update.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config_table.h"
#include "api/yaml_config.h"
#include "core/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvmesh_config c, before;
    kvm_config_defaults(&c);
    before = c;
    int rc = kvm_config_load_yaml(&c, (const char *)data, size, "f");
    if (rc != 0) {
        KVM_ASSERT(rc == KVMESH_ECONFIG);
        KVM_ASSERT(strncmp(kvmesh_last_error(), "f:", 2) == 0);
        KVM_ASSERT(memcmp(&c, &before, sizeof(c)) == 0);
        return 0;
    }
    static char buf[1 << 16];
    size_t len = kvm_config_dump_yaml(&c, buf, sizeof(buf));
    KVM_ASSERT(len < sizeof(buf));
    struct kvmesh_config d;
    kvm_config_defaults(&d);
    KVM_ASSERT(kvm_config_load_yaml(&d, buf, len, "dump") == 0);
    KVM_ASSERT(memcmp(&c, &d, sizeof(c)) == 0);
    /* Cross-field validation must return, never crash. */
    int v = kvm_config_validate(&c);
    KVM_ASSERT(v == 0 || v == KVMESH_ECONFIG);
    return 0;
}
