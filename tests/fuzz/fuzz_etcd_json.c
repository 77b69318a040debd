/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_etcd_json.c — libFuzzer target for the etcd gateway reply decoders (etcd_json_decode).
 * The first input byte selects the reply kind and the HTTP status class; the rest is the body.
 * Every decode must return 0 or a KVMESH_E* code with a message, and a successful one must
 * describe a result whose pointers are readable (checked by touching every byte).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvmesh.h"
#include "meta/etcd_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch_kv(const meta_kv_t *kv)
{
    if (!kv->found)
        return;
    sink ^= (uint8_t)strlen(kv->key);
    for (size_t i = 0; i < kv->value_len; i++)
        sink ^= kv->value[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const long statuses[] = {200, 400, 404, 503};
    enum etcd_resp_kind kind = (enum etcd_resp_kind)(data[0] % 7);
    long status = statuses[(data[0] >> 3) % 4];
    meta_op_t then_ops[] = {{.type = META_OP_PUT, .key = "a"},
                            {.type = META_OP_DEL, .key = "b"},
                            {.type = META_OP_GET, .key = "c"}};
    meta_op_t else_ops[] = {{.type = META_OP_GET, .key = "a"}};
    etcd_txn_shape_t shape = {.then_ops = then_ops,
                              .n_then = 3,
                              .else_ops = else_ops,
                              .n_else = 1,
                              .range_limit = (uint32_t)(data[0] >> 5) + 1};
    etcd_resp_t r;
    int rc = etcd_json_decode(kind, (const char *)data + 1, size - 1, status, &shape, &r);
    if (rc != r.res.rc || r.res.errmsg == NULL)
        __builtin_trap();
    if (rc > 0 || (rc < 0 && (rc < KVMESH_ERROR_BAND_FIRST || rc > KVMESH_ERROR_BAND_LAST)))
        __builtin_trap();
    if (rc == 0) {
        touch_kv(&r.res.kv);
        for (size_t i = 0; i < r.res.n_kvs; i++)
            touch_kv(&r.res.kvs[i]);
        for (size_t i = 0; i < r.res.n_ops; i++)
            touch_kv(&r.res.ops[i]);
        if (kind == ETCD_RESP_RANGE && r.res.n_kvs > shape.range_limit)
            __builtin_trap();
    }
    etcd_resp_free(&r);
    return 0;
}
