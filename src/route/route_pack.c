/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_pack.c — compact packed routes and the id interning sets (route_pack.h).
 */
#include "route/route_pack.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

enum {
    F_PRED_OP = 1,    /* predecessor op is not all-zero */
    F_COLD = 2,       /* cold.kind != NONE */
    F_EXACT = 4,      /* every replica's length/checksum equal the route's */
    F_RETAIN = 8,     /* retain_until_ms != 0 */
    F_SAME_TOKEN = 16 /* predecessor_version.fencing_token == version.fencing_token */
};

/* ---- interning ------------------------------------------------------------------------------ */

static uint32_t slot_of(const kvm_id128_t *id, uint32_t mcap)
{
    return (uint32_t)kvm_id128_hash(id) & (mcap - 1);
}

int64_t rp_intern_find(const rp_intern_t *in, const kvm_id128_t *id)
{
    if (!in->mcap)
        return -1;
    for (uint32_t s = slot_of(id, in->mcap), k = 0; k < in->mcap;
         k++, s = (s + 1) & (in->mcap - 1)) {
        uint32_t v = in->map[s];
        if (!v)
            return -1;
        if (kvm_id128_equal(&in->keys[v - 1], id))
            return v - 1;
    }
    return -1;
}

uint32_t rp_owner_refs(const rp_intern_t *in, uint32_t idx)
{
    return idx < in->n ? in->orefs[idx] : 0;
}

static void map_insert(uint32_t *map, uint32_t mcap, const kvm_id128_t *key, uint32_t idx)
{
    uint32_t s = slot_of(key, mcap);
    while (map[s])
        s = (s + 1) & (mcap - 1);
    map[s] = idx + 1;
}

static int grow(rp_intern_t *in)
{
    if (in->n == in->cap) {
        uint32_t nc = in->cap ? in->cap * 2 : 8;
        kvm_id128_t *k = realloc(in->keys, nc * sizeof(*k));
        if (!k)
            return KVMESH_ENOMEM;
        in->keys = k;
        uint32_t *r = realloc(in->refs, nc * sizeof(*r));
        if (!r)
            return KVMESH_ENOMEM;
        in->refs = r;
        r = realloc(in->orefs, nc * sizeof(*r));
        if (!r)
            return KVMESH_ENOMEM;
        in->orefs = r;
        r = realloc(in->free_list, nc * sizeof(*r));
        if (!r)
            return KVMESH_ENOMEM;
        in->free_list = r;
        in->cap = nc;
    }
    if ((uint64_t)(in->live + 1) * 2 > in->mcap) { /* load <= 1/2 */
        uint32_t mc = in->mcap ? in->mcap * 2 : 16;
        uint32_t *m = calloc(mc, sizeof(*m));
        if (!m)
            return KVMESH_ENOMEM;
        for (uint32_t i = 0; i < in->n; i++)
            if (in->refs[i])
                map_insert(m, mc, &in->keys[i], i);
        free(in->map);
        in->map = m;
        in->mcap = mc;
    }
    return 0;
}

/* One reference to id (interned on first use): *idx gets its index. KVMESH_ENOMEM. */
static int intern_ref(rp_intern_t *in, const kvm_id128_t *id, bool owner, uint32_t *idx)
{
    int64_t f = rp_intern_find(in, id);
    if (f < 0) {
        if (grow(in) != 0)
            return KVMESH_ENOMEM;
        uint32_t i = in->n_free ? in->free_list[--in->n_free] : in->n++;
        in->keys[i] = *id;
        in->refs[i] = in->orefs[i] = 0;
        map_insert(in->map, in->mcap, id, i);
        in->live++;
        f = i;
    }
    *idx = (uint32_t)f;
    in->refs[f]++;
    in->orefs[f] += owner;
    return 0;
}

/* Linear-probing delete with backward shift: the probe chains stay unbroken. */
static void map_delete(rp_intern_t *in, uint32_t idx)
{
    uint32_t m = in->mcap - 1, s = slot_of(&in->keys[idx], in->mcap);
    while (in->map[s] != idx + 1) {
        KVM_ASSERT(in->map[s] != 0);
        s = (s + 1) & m;
    }
    uint32_t hole = s;
    for (uint32_t j = (hole + 1) & m; in->map[j]; j = (j + 1) & m) {
        uint32_t home = slot_of(&in->keys[in->map[j] - 1], in->mcap);
        /* the entry at j may fill the hole unless its home lies cyclically in (hole, j] */
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            in->map[hole] = in->map[j];
            hole = j;
        }
    }
    in->map[hole] = 0;
}

static void intern_unref(rp_intern_t *in, uint32_t idx, bool owner)
{
    KVM_ASSERT(idx < in->n && in->refs[idx] > 0);
    in->orefs[idx] -= owner;
    if (--in->refs[idx])
        return;
    KVM_ASSERT(in->orefs[idx] == 0);
    map_delete(in, idx);
    in->free_list[in->n_free++] = idx;
    in->live--;
}

static void intern_fini(rp_intern_t *in)
{
    free(in->keys);
    free(in->refs);
    free(in->orefs);
    free(in->free_list);
    free(in->map);
    memset(in, 0, sizeof(*in));
}

void rp_sets_fini(rp_sets_t *s)
{
    intern_fini(&s->ids);
    intern_fini(&s->segs);
}

static size_t intern_bytes(const rp_intern_t *in)
{
    return in->cap * (sizeof(kvm_id128_t) + 3 * sizeof(uint32_t)) + in->mcap * sizeof(uint32_t);
}

size_t rp_sets_bytes(const rp_sets_t *s)
{
    return intern_bytes(&s->ids) + intern_bytes(&s->segs);
}

static kvm_id128_t seg_key(uint64_t seg)
{
    return kvm_id128_from_u64(0, seg);
}

static uint64_t seg_of_key(const kvm_id128_t *k)
{
    uint64_t v = 0;
    for (int i = 8; i < 16; i++)
        v = v << 8 | k->b[i];
    return v;
}

/* ---- byte cursor ---------------------------------------------------------------------------- */

typedef struct wr {
    uint8_t *p;
    size_t n;
} wr_t;

static void put_v(wr_t *w, uint64_t v)
{
    KVM_ASSERT(w->n + 10 <= RP_MAX_PACKED);
    while (v >= 0x80) {
        w->p[w->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    w->p[w->n++] = (uint8_t)v;
}

static void put_u64(wr_t *w, uint64_t v)
{
    KVM_ASSERT(w->n + 8 <= RP_MAX_PACKED);
    for (int i = 0; i < 8; i++)
        w->p[w->n++] = (uint8_t)(v >> (8 * i));
}

typedef struct rd {
    const uint8_t *p;
    size_t n, at;
} rd_t;

static uint64_t get_v(rd_t *r)
{
    uint64_t v = 0;
    for (unsigned sh = 0; sh < 64; sh += 7) {
        KVM_ASSERT(r->at < r->n);
        uint8_t b = r->p[r->at++];
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
    }
    KVM_ASSERT(!"packed route: varint too long");
    return v;
}

static uint64_t get_u64(rd_t *r)
{
    KVM_ASSERT(r->at + 8 <= r->n);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | r->p[r->at + (size_t)i];
    r->at += 8;
    return v;
}

/* ---- pack ----------------------------------------------------------------------------------- */

typedef struct taken { /* references taken by one pack, to undo on failure */
    uint32_t id[4 + 2 * KVM_MAX_REPLICAS], n_id;
    bool id_owner[4 + 2 * KVM_MAX_REPLICAS];
    uint32_t seg[KVM_MAX_REPLICAS], n_seg;
} taken_t;

static int put_id(rp_sets_t *s, taken_t *tk, wr_t *w, const kvm_id128_t *id, bool owner)
{
    uint32_t idx;
    if (intern_ref(&s->ids, id, owner, &idx) != 0)
        return KVMESH_ENOMEM;
    KVM_ASSERT(tk->n_id < sizeof(tk->id) / sizeof(tk->id[0]));
    tk->id_owner[tk->n_id] = owner;
    tk->id[tk->n_id++] = idx;
    put_v(w, idx);
    return 0;
}

static int put_op(rp_sets_t *s, taken_t *tk, wr_t *w, const kvm_op_id_t *op)
{
    if (put_id(s, tk, w, &op->writer, false) != 0)
        return KVMESH_ENOMEM;
    put_v(w, op->epoch);
    put_v(w, op->seq);
    return 0;
}

static bool op_zero(const kvm_op_id_t *op)
{
    return kvm_id128_is_nil(&op->writer) && op->epoch == 0 && op->seq == 0;
}

static int pack_body(rp_sets_t *s, const kvm_route_t *r, taken_t *tk, wr_t *w)
{
    uint32_t nrep = KVM_MIN(r->n_replicas, KVM_MAX_REPLICAS);
    bool exact = true;
    for (uint32_t i = 0; i < nrep; i++)
        exact =
            exact && r->replicas[i].length == r->length && r->replicas[i].checksum == r->checksum;
    bool same = r->predecessor_version.fencing_token == r->version.fencing_token;
    uint8_t flags = (uint8_t)((op_zero(&r->predecessor_op) ? 0 : F_PRED_OP) |
                              (r->cold.kind != KVM_COLD_NONE ? F_COLD : 0) | (exact ? F_EXACT : 0) |
                              (r->retain_until_ms ? F_RETAIN : 0) | (same ? F_SAME_TOKEN : 0));
    w->p[w->n++] = flags;
    put_v(w, r->n_replicas);
    for (uint32_t i = 0; i < nrep; i++) {
        const kvm_hot_replica_t *h = &r->replicas[i];
        if (put_id(s, tk, w, &h->owner, true) != 0)
            return KVMESH_ENOMEM;
        kvm_id128_t k = seg_key(h->segment);
        uint32_t si;
        if (intern_ref(&s->segs, &k, false, &si) != 0)
            return KVMESH_ENOMEM;
        tk->seg[tk->n_seg++] = si;
        put_v(w, si);
        put_v(w, h->offset);
        if (!exact) {
            put_v(w, h->length);
            put_u64(w, h->checksum);
        }
    }
    put_v(w, r->version.fencing_token);
    put_v(w, r->version.primary_sequence);
    if (!same)
        put_v(w, r->predecessor_version.fencing_token);
    put_v(w, r->predecessor_version.primary_sequence);
    if (put_op(s, tk, w, &r->content_op) != 0)
        return KVMESH_ENOMEM;
    if ((flags & F_PRED_OP) && put_op(s, tk, w, &r->predecessor_op) != 0)
        return KVMESH_ENOMEM;
    put_v(w, r->length);
    put_u64(w, r->checksum);
    put_v(w, (uint32_t)r->tomb);
    if (flags & F_RETAIN)
        put_v(w, r->retain_until_ms);
    if (flags & F_COLD) {
        const kvm_cold_backing_t *c = &r->cold;
        put_v(w, (uint32_t)c->kind);
        if (put_op(s, tk, w, &c->cold_op) != 0 || put_op(s, tk, w, &c->content_op) != 0 ||
            put_id(s, tk, w, &c->owner, false) != 0 || put_id(s, tk, w, &c->tier, false) != 0)
            return KVMESH_ENOMEM;
        if (c->kind == KVM_COLD_PENDING_OFFLOAD) {
            put_v(w, c->u.pending.expected_length);
            put_u64(w, c->u.pending.expected_checksum);
        } else if (c->kind == KVM_COLD_MATERIALIZED) {
            uint32_t ll = KVM_MIN(c->u.mat.locator_len, KVM_COLD_LOCATOR_MAX_LEN);
            put_v(w, c->u.mat.length);
            put_u64(w, c->u.mat.checksum);
            put_v(w, c->u.mat.locator_len);
            KVM_ASSERT(w->n + ll <= RP_MAX_PACKED);
            memcpy(w->p + w->n, c->u.mat.locator, ll);
            w->n += ll;
        }
    }
    return 0;
}

int rp_pack(rp_sets_t *s, const kvm_route_t *r, uint8_t *out, size_t *len)
{
    taken_t tk = {.n_id = 0, .n_seg = 0};
    wr_t w = {out, 0};
    if (pack_body(s, r, &tk, &w) != 0) {
        for (uint32_t i = 0; i < tk.n_id; i++)
            intern_unref(&s->ids, tk.id[i], tk.id_owner[i]);
        for (uint32_t i = 0; i < tk.n_seg; i++)
            intern_unref(&s->segs, tk.seg[i], false);
        return KVMESH_ENOMEM;
    }
    *len = w.n;
    return 0;
}

/* ---- unpack --------------------------------------------------------------------------------- */

/* Walks a packed route: fills out (when not NULL) and calls id/seg visitors (when not NULL). */
typedef struct walk {
    const rp_sets_t *s;
    kvm_route_t *out;
    void (*on_id)(void *, uint32_t idx, bool owner);
    void (*on_seg)(void *, uint32_t idx);
    void *arg;
} walk_t;

static void get_id(walk_t *wk, rd_t *r, kvm_id128_t *dst, bool owner)
{
    uint32_t idx = (uint32_t)get_v(r);
    if (wk->on_id)
        wk->on_id(wk->arg, idx, owner);
    if (dst) {
        KVM_ASSERT(idx < wk->s->ids.n && wk->s->ids.refs[idx] > 0);
        *dst = wk->s->ids.keys[idx];
    }
}

static void get_op(walk_t *wk, rd_t *r, kvm_op_id_t *op)
{
    kvm_op_id_t tmp;
    kvm_op_id_t *o = op ? op : &tmp;
    get_id(wk, r, op ? &o->writer : NULL, false);
    o->epoch = get_v(r);
    o->seq = get_v(r);
}

static void walk(walk_t *wk, const uint8_t *p, size_t len)
{
    rd_t r = {p, len, 0};
    kvm_route_t scratch;
    kvm_route_t *o = wk->out ? wk->out : &scratch;
    bool fill = wk->out != NULL;
    KVM_ASSERT(len >= 1);
    uint8_t flags = p[r.at++];
    o->n_replicas = (uint32_t)get_v(&r);
    uint32_t nrep = KVM_MIN(o->n_replicas, KVM_MAX_REPLICAS);
    for (uint32_t i = 0; i < nrep; i++) {
        kvm_hot_replica_t *h = &o->replicas[i];
        get_id(wk, &r, fill ? &h->owner : NULL, true);
        uint32_t si = (uint32_t)get_v(&r);
        if (wk->on_seg)
            wk->on_seg(wk->arg, si);
        if (fill) {
            KVM_ASSERT(si < wk->s->segs.n && wk->s->segs.refs[si] > 0);
            h->segment = seg_of_key(&wk->s->segs.keys[si]);
        }
        h->offset = get_v(&r);
        if (!(flags & F_EXACT)) {
            h->length = get_v(&r);
            h->checksum = get_u64(&r);
        }
    }
    o->version.fencing_token = get_v(&r);
    o->version.primary_sequence = get_v(&r);
    o->predecessor_version.fencing_token =
        (flags & F_SAME_TOKEN) ? o->version.fencing_token : get_v(&r);
    o->predecessor_version.primary_sequence = get_v(&r);
    get_op(wk, &r, fill ? &o->content_op : NULL);
    if (flags & F_PRED_OP)
        get_op(wk, &r, fill ? &o->predecessor_op : NULL);
    o->length = get_v(&r);
    o->checksum = get_u64(&r);
    o->tomb = (kvm_tomb_state_t)get_v(&r);
    if (flags & F_RETAIN)
        o->retain_until_ms = get_v(&r);
    if (flags & F_EXACT)
        for (uint32_t i = 0; i < nrep; i++) {
            o->replicas[i].length = o->length;
            o->replicas[i].checksum = o->checksum;
        }
    if (flags & F_COLD) {
        kvm_cold_backing_t *c = &o->cold;
        c->kind = (kvm_cold_kind_t)get_v(&r);
        get_op(wk, &r, fill ? &c->cold_op : NULL);
        get_op(wk, &r, fill ? &c->content_op : NULL);
        get_id(wk, &r, fill ? &c->owner : NULL, false);
        get_id(wk, &r, fill ? &c->tier : NULL, false);
        if (c->kind == KVM_COLD_PENDING_OFFLOAD) {
            c->u.pending.expected_length = get_v(&r);
            c->u.pending.expected_checksum = get_u64(&r);
        } else if (c->kind == KVM_COLD_MATERIALIZED) {
            c->u.mat.length = get_v(&r);
            c->u.mat.checksum = get_u64(&r);
            c->u.mat.locator_len = (uint16_t)get_v(&r);
            uint32_t ll = KVM_MIN(c->u.mat.locator_len, KVM_COLD_LOCATOR_MAX_LEN);
            KVM_ASSERT(r.at + ll <= r.n);
            memcpy(c->u.mat.locator, r.p + r.at, ll);
            r.at += ll;
        }
    }
    KVM_ASSERT(r.at == r.n);
}

void rp_unpack(const rp_sets_t *s, const uint8_t *p, size_t len, kvm_route_t *out)
{
    kvm_route_init_sparse(out); /* (walk writes every field of the route: replicas below
                                   n_replicas, the locator's locator_len bytes) */
    walk_t wk = {.s = s, .out = out};
    walk(&wk, p, len);
}

static void unref_id(void *arg, uint32_t idx, bool owner)
{
    intern_unref(&((rp_sets_t *)arg)->ids, idx, owner);
}

static void unref_seg(void *arg, uint32_t idx)
{
    intern_unref(&((rp_sets_t *)arg)->segs, idx, false);
}

void rp_unref(rp_sets_t *s, const uint8_t *p, size_t len)
{
    walk_t wk = {.s = s, .on_id = unref_id, .on_seg = unref_seg, .arg = s};
    walk(&wk, p, len);
}

typedef struct counts {
    uint32_t *id_refs, *id_orefs, *seg_refs;
} counts_t;

static void count_id(void *arg, uint32_t idx, bool owner)
{
    counts_t *c = arg;
    c->id_refs[idx]++;
    c->id_orefs[idx] += owner;
}

static void count_seg(void *arg, uint32_t idx)
{
    ((counts_t *)arg)->seg_refs[idx]++;
}

void rp_count(const uint8_t *p, size_t len, uint32_t *id_refs, uint32_t *id_orefs,
              uint32_t *seg_refs)
{
    counts_t c = {id_refs, id_orefs, seg_refs};
    walk_t wk = {.on_id = count_id, .on_seg = count_seg, .arg = &c};
    walk(&wk, p, len);
}

/* Skips the flags and replicas; *flags gets the flags. */
static void skip_replicas(rd_t *r, uint8_t *flags)
{
    *flags = r->p[r->at++];
    uint64_t n_all = get_v(r);
    uint32_t nrep = (uint32_t)KVM_MIN(n_all, KVM_MAX_REPLICAS);
    for (uint32_t i = 0; i < nrep; i++) {
        (void)get_v(r);
        (void)get_v(r);
        (void)get_v(r);
        if (!(*flags & F_EXACT)) {
            (void)get_v(r);
            (void)get_u64(r);
        }
    }
}

kvm_route_version_t rp_version(const uint8_t *p, size_t len)
{
    rd_t r = {p, len, 0};
    uint8_t flags;
    skip_replicas(&r, &flags);
    kvm_route_version_t v;
    v.fencing_token = get_v(&r);
    v.primary_sequence = get_v(&r);
    return v;
}

void rp_head(const rp_sets_t *s, const uint8_t *p, size_t len, rp_head_t *out)
{
    rd_t r = {p, len, 0};
    uint8_t flags;
    skip_replicas(&r, &flags);
    out->version.fencing_token = get_v(&r);
    out->version.primary_sequence = get_v(&r);
    if (!(flags & F_SAME_TOKEN))
        (void)get_v(&r); /* the predecessor version */
    (void)get_v(&r);
    walk_t wk = {.s = s};
    get_op(&wk, &r, &out->content_op);
    if (flags & F_PRED_OP)
        get_op(&wk, &r, NULL);
    (void)get_v(&r); /* length, checksum */
    (void)get_u64(&r);
    out->tomb = (kvm_tomb_state_t)get_v(&r);
    out->retain_until_ms = (flags & F_RETAIN) ? get_v(&r) : 0;
}

bool rp_has_owner(const uint8_t *p, size_t len, uint32_t idx)
{
    rd_t r = {p, len, 0};
    uint8_t flags = p[r.at++];
    uint64_t n_all = get_v(&r);
    uint32_t nrep = (uint32_t)KVM_MIN(n_all, KVM_MAX_REPLICAS);
    for (uint32_t i = 0; i < nrep; i++) {
        if (get_v(&r) == idx)
            return true;
        (void)get_v(&r);
        (void)get_v(&r);
        if (!(flags & F_EXACT)) {
            (void)get_v(&r);
            (void)get_u64(&r);
        }
    }
    return false;
}
