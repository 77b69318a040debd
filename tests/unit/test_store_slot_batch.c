/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batched COMMIT and RELEASE (src/store/slot_batch.h, docs/store.md "Batched COMMIT and
 * RELEASE") at a runtime's close: a client-only runtime C and a storage runtime S over tcp.
 *
 * - a group left open at close: C opens a group on its loop, two RELEASEs to S join S's batch,
 *   and C closes without the group's end (the route service that would end it is freed by the
 *   close). The close sends the queued batch (S applies both items) and frees the outbox
 *   (before, it leaked: ASan's leak check fails this test, and S never received the batch).
 *
 * The RELEASEs name S's committed slot with another write-grant token: S ignores each and counts
 * it (slot_core_stats_t.notes_stale), which shows that exactly those two items arrived.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/kvmesh_tools.h"
#include "env/env.h"
#include "kvmesh.h"
#include "net/seg.h"
#include "store/proto.h"
#include "store/slot_batch.h"
#include "store/store.h"
#include "trt.h"

static const kvmesh_scope_t SC = {"slotb", NULL};

static kvmesh_t *open_rt(const char *url, const char *mem)
{
    static const char *const base[][2] = {{"route_mode", "metadata_only"},
                                          {"transport", "tcp"},
                                          {"segment_size", "1048576"},
                                          {"max_object_size", "65536"},
                                          {NULL, NULL}};
    const char *const mine[][2] = {{"metadata_url", url}, {"memory_size", mem}, {NULL, NULL}};
    kvmesh_t *kv = trt_open(base, mine);
    assert_non_null(kv);
    return kv;
}

/* Runs fn(arg) on kv's loop and waits for it (bounded). */
static void run_on_loop(kvmesh_t *kv, void (*fn)(kvm_rt_t *rt, void *arg), void *arg)
{
    assert_int_equal(trt_on_loop(kv, fn, arg, 10000), 0);
}

/* S's slot core: the committed slot's place and token, and the notes ignored so far */
struct owner_view {
    uint64_t seg, off, token, notes_stale;
    bool found;
};

static void read_owner(kvm_rt_t *rt, void *arg)
{
    struct owner_view *o = arg;
    const slot_t *sl[1];
    o->found = slot_core_list(rt->slots, -1, 0, sl, 1) == 1;
    if (o->found) {
        o->seg = rt->segs[sl[0]->segi].seg->id;
        o->off = slot_off(sl[0]);
        o->token = sl[0]->token;
    }
    slot_core_stats_t cs;
    slot_core_stats(rt->slots, &cs);
    o->notes_stale = cs.notes_stale;
}

static struct owner_view owner_view(kvmesh_t *kv)
{
    struct owner_view o = {0};
    run_on_loop(kv, read_owner, &o);
    return o;
}

struct open_group {
    kvm_runtime_id_t owner;
    struct owner_view at; /* the slot the RELEASEs name, with another token */
    bool queued;
};

/* C's loop: a group opens (as the route service's hook opens it) and two RELEASEs to S join
 * S's batch; the group is not ended. */
static void group_left_open(kvm_rt_t *rt, void *arg)
{
    struct open_group *g = arg;
    const struct kvm_member *m = kvm_member_find(rt, &g->owner);
    if (!m)
        return;
    kvm_slot_batch_begin(rt);
    for (uint64_t i = 1; i <= 2; i++) {
        slot_note_t note = {.has = SLOT_NOTE_TOKEN, .token = g->at.token + i}; /* not its own */
        kvm_slot_notify(rt, STORE_RPC_RELEASE, m, g->at.seg, g->at.off, &note, NULL);
    }
    g->queued = rt->slotb_box != NULL && rt->slotb_depth == 1;
}

static void test_group_open_at_close(void **state)
{
    (void)state;
    kvmesh_t *s = open_rt("memory://slotb-close", "1048576");
    kvmesh_t *c = open_rt("memory://slotb-close", "0");
    size_t n = 0;
    for (int t = 0; t < 200 && n != 2; t++) {
        kvmesh_members(c, NULL, 0, &n);
        if (n != 2)
            usleep(20000);
    }
    assert_int_equal(n, 2);
    /* a put gives S a committed slot and connects C to S (the batch leaves on a live
     * connection); its COMMIT is one-way: wait (bounded) for the slot */
    static const uint8_t v[4096];
    assert_int_equal(kvmesh_put(c, &SC, "k", 1, v, sizeof(v), NULL), 0);
    struct open_group g = {.owner = kvmesh_runtime_of(s)->self.id};
    for (int t = 0; t < 1000 && !(g.at = owner_view(s)).found; t++)
        usleep(10000);
    assert_true(g.at.found);
    assert_int_not_equal(g.at.token, 0);

    run_on_loop(c, group_left_open, &g);
    assert_true(g.queued); /* queued for S, not sent */
    assert_int_equal(owner_view(s).notes_stale, g.at.notes_stale);

    kvmesh_close(c); /* the group never ends: the close sends and frees what it queued */
    struct owner_view after = owner_view(s);
    for (int t = 0; t < 1000 && after.notes_stale == g.at.notes_stale; t++) {
        usleep(10000);
        after = owner_view(s);
    }
    print_message("S ignored %" PRIu64 " note(s) after C's close\n",
                  after.notes_stale - g.at.notes_stale);
    assert_int_equal(after.notes_stale, g.at.notes_stale + 2); /* both items of the batch */
    assert_true(after.found); /* named another token: the slot stays committed */
    assert_int_equal(after.off, g.at.off);
    kvmesh_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_open_at_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
