/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin.c — `kvmesh admin`: the operator's view of a deployment's metadata, read directly
 * (no runtime joins) in bounded pages through api/kvmesh_tools.h:
 *   members    member records: id, epoch, state, weight, capacity, used, heartbeat, addresses
 *              (rpc, data, and rpc_local = unix's unix socket and host identity)
 *   segments   the memory segments each member record lists, active or drained; drain /
 *              activate one segment through the member's lifecycle request (lifecycle.c)
 *   shards     shard-authority records: generation, fencing token, state, primary, set, and
 *              whether the primary is a live member
 *   cleanup    stale records of dead owners: a dry run lists them; --apply deletes the stale
 *              member records (each only if unchanged since it was read). Shard records of dead
 *              primaries are listed but never deleted: they carry the monotonic fencing token
 *              and the state-transfer source, and the route service takes them over.
 *   policy     tenant policy records (list, get); `policy set` is in admin_policy.c
 *   quota      a tenant's usage and reservations, abort, reconcile; `quota TENANT object KEY`
 *              (one object's accounting row) is in admin_object.c
 * Every listing has --json (one JSON document on stdout) or a table. Reads are pages of
 * --page records, at most --max records in all (the listing says when it stopped early).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define ADM_MAX_OPTS     24
#define ADM_PAGE_DEFAULT 100
#define ADM_MAX_DEFAULT  10000
#define ADM_MAX_LIMIT    1000000

struct adm {
    struct cli_common c;
    bool json, apply;
    uint64_t page, max, wait_ms;
    kvmesh_admin_t *a;
    kvmesh_config_t *cfg;
    const char *sub;
    const char *op;     /* quota abort --op */
    const char *op_seg; /* segments: "drain" or "activate" */
};

void admin_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* ---- paging -------------------------------------------------------------------------------- */

struct members {
    kvmesh_admin_member_t *v;
    size_t n;
    bool truncated;
};

/* Reads every member record, page by page, at most max. */
static int fetch_members(struct adm *x, struct members *m)
{
    memset(m, 0, sizeof(*m));
    size_t cap = 0;
    char after[KVMESH_ID_HEX_LEN + 1] = "";
    for (;;) {
        if (m->n >= x->max) {
            m->truncated = true; /* the last page said more records follow */
            return 0;
        }
        size_t want = x->page < x->max - m->n ? (size_t)x->page : (size_t)(x->max - m->n);
        if (m->n + want > cap) {
            size_t nc = cap ? cap * 2 : 256;
            while (nc < m->n + want)
                nc *= 2;
            kvmesh_admin_member_t *nv = realloc(m->v, nc * sizeof(*nv));
            if (!nv)
                return KVMESH_ENOMEM;
            m->v = nv;
            cap = nc;
        }
        size_t got = 0;
        bool more = false;
        int rc = kvmesh_admin_members(x->a, after, want, m->v + m->n, &got, &more);
        if (rc)
            return rc;
        m->n += got;
        if (!more || got == 0)
            return 0;
        snprintf(after, sizeof(after), "%s", m->v[m->n - 1].id);
    }
}

/* fetch_members(), reporting a failure (CLI_EXIT_FAIL; m then holds nothing). */
static int load_members(struct adm *x, struct members *m)
{
    int rc = fetch_members(x, m);
    if (rc) {
        cli_report("admin", "reading member records", rc);
        free(m->v);
        memset(m, 0, sizeof(*m));
        return CLI_EXIT_FAIL;
    }
    return 0;
}

struct requests {
    kvmesh_admin_lifecycle_t *v;
    size_t n;
    bool truncated;
};

/* Every lifecycle request (drain), page by page, at most --max. */
static int fetch_requests(struct adm *x, struct requests *r)
{
    memset(r, 0, sizeof(*r));
    size_t cap = 0;
    char after[KVMESH_ID_HEX_LEN + 1] = "";
    for (;;) {
        if (r->n >= x->max) {
            r->truncated = true;
            return 0;
        }
        size_t want = x->page < x->max - r->n ? (size_t)x->page : (size_t)(x->max - r->n);
        if (r->n + want > cap) {
            size_t nc = cap ? cap * 2 : 64;
            while (nc < r->n + want)
                nc *= 2;
            kvmesh_admin_lifecycle_t *nv = realloc(r->v, nc * sizeof(*nv));
            if (!nv)
                return KVMESH_ENOMEM;
            r->v = nv;
            cap = nc;
        }
        size_t got = 0;
        bool more = false;
        int rc = kvmesh_admin_lifecycles(x->a, after, want, r->v + r->n, &got, &more);
        if (rc)
            return rc;
        r->n += got;
        if (!more || got == 0)
            return 0;
        snprintf(after, sizeof(after), "%s", r->v[r->n - 1].id);
    }
}

static const kvmesh_admin_lifecycle_t *record_of(const struct requests *r, const char *id)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->v[i].id, id) == 0)
            return &r->v[i];
    return NULL;
}

/* The member request of id: "draining", "malformed", or NULL (none, or only segments). */
static const char *request_of(const struct requests *r, const char *id)
{
    const kvmesh_admin_lifecycle_t *l = record_of(r, id);
    return l && strcmp(l->state, "active") != 0 ? l->state : NULL;
}

/* Does the request record of id ask for segment seg to be drained? */
static bool seg_requested(const struct requests *r, const char *id, uint64_t seg)
{
    const kvmesh_admin_lifecycle_t *l = record_of(r, id);
    for (uint32_t k = 0; l && k < l->n_segments; k++)
        if (l->segments[k] == seg)
            return true;
    return false;
}

static const kvmesh_admin_member_t *find_member(const struct members *m, const char *id,
                                                uint64_t epoch)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].id, id) == 0 && (epoch == 0 || m->v[i].epoch == epoch))
            return &m->v[i];
    return NULL;
}

/* ---- member lifecycle ---------------------------------------------------------------------- */

#define ADM_WAIT_DEFAULT_MS 15000
#define ADM_WAIT_MAX_MS     600000
#define ADM_POLL_MS         200

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Is s 1..32 hex digits? (lower-cased into out) */
static bool member_arg_ok(const char *s, char out[KVMESH_ID_HEX_LEN + 1])
{
    size_t n = strlen(s);
    if (n < 1 || n > KVMESH_ID_HEX_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch >= 'A' && ch <= 'F')
            ch = (char)(ch - 'A' + 'a');
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return false;
        out[i] = ch;
    }
    out[n] = 0;
    return true;
}

/* The member record named by arg (a full id, or a prefix matching exactly one record). Returns
 * 0, or an exit status with the message printed. */
static int resolve_member(struct adm *x, const char *arg, kvmesh_admin_member_t *out)
{
    char id[KVMESH_ID_HEX_LEN + 1];
    if (!member_arg_ok(arg, id)) {
        fprintf(stderr,
                "kvmesh admin %s: \"%s\" is not a member id (32 hex digits, or a unique prefix "
                "of one; see kvmesh admin members)\n",
                x->sub, arg);
        return CLI_EXIT_USAGE;
    }
    bool found = false;
    int rc = 0;
    if (strlen(id) == KVMESH_ID_HEX_LEN) {
        if ((rc = kvmesh_admin_member_get(x->a, id, out, &found)) != 0) {
            cli_report("admin", "reading the member record", rc);
            return CLI_EXIT_FAIL;
        }
    } else {
        struct members m;
        if (load_members(x, &m) != 0)
            return CLI_EXIT_FAIL;
        size_t hits = 0;
        for (size_t i = 0; i < m.n; i++) {
            if (strncmp(m.v[i].id, id, strlen(id)) != 0)
                continue;
            if (hits++ == 0)
                *out = m.v[i];
            else if (hits == 2)
                fprintf(stderr,
                        "kvmesh admin %s: \"%s\" matches more than one member (%s, %s%s); give "
                        "more digits\n",
                        x->sub, arg, out->id, m.v[i].id, m.truncated ? ", of the first --max" : "");
        }
        free(m.v);
        if (hits > 1)
            return CLI_EXIT_USAGE;
        found = hits == 1;
    }
    if (!found) {
        fprintf(stderr,
                "kvmesh admin %s: no member record matches \"%s\" in deployment %s (see kvmesh "
                "admin members)\n",
                x->sub, arg, kvmesh_tools_config_str(x->cfg, "deployment"));
        return CLI_EXIT_ENOENT;
    }
    if (out->malformed) {
        fprintf(stderr, "kvmesh admin %s: the member record of %s is malformed\n", x->sub, out->id);
        return CLI_EXIT_FAIL;
    }
    return 0;
}

/* drain / activate: writes (or deletes) the member's lifecycle request, then waits up to
 * --wait-ms for its record to show the state. */
static int do_lifecycle(struct adm *x, const char *arg)
{
    bool drain = strcmp(x->sub, "drain") == 0;
    const char *want = drain ? "draining" : "active";
    kvmesh_admin_member_t m;
    char full[KVMESH_ID_HEX_LEN + 1];
    bool found = false;
    if (!drain && member_arg_ok(arg, full) && strlen(full) == KVMESH_ID_HEX_LEN &&
        kvmesh_admin_member_get(x->a, full, &m, &found) == 0 && !found) {
        /* no member record (it is down): remove a request it would apply when it joins */
        char prior[16];
        int rc = kvmesh_admin_lifecycle_get(x->a, full, prior, sizeof(prior));
        if (rc == 0 && prior[0])
            rc = kvmesh_admin_lifecycle_request(x->a, full, "active");
        if (rc) {
            cli_report("admin", "removing the lifecycle request", rc);
            return CLI_EXIT_FAIL;
        }
        if (prior[0]) {
            if (x->json)
                printf("{\"member\":\"%s\",\"request\":\"active\",\"state\":null,"
                       "\"applied\":false,\"removed_request\":\"%s\"}\n",
                       full, prior);
            else
                printf("member %s has no member record: its %s request is removed\n", full, prior);
            return CLI_EXIT_OK;
        }
    }
    int ret = resolve_member(x, arg, &m);
    if (ret)
        return ret;
    if (strcmp(m.state, "active") != 0 && strcmp(m.state, "draining") != 0) {
        fprintf(stderr,
                "kvmesh admin %s: member %s is %s; only an active or draining member takes "
                "lifecycle requests\n",
                x->sub, m.id, m.state);
        return CLI_EXIT_FAIL;
    }
    char prior[16];
    int rc = kvmesh_admin_lifecycle_get(x->a, m.id, prior, sizeof(prior));
    if (rc) {
        cli_report("admin", "reading the lifecycle request", rc);
        return CLI_EXIT_FAIL;
    }
    if (!drain && strcmp(m.state, "draining") == 0 && strcmp(prior, "draining") != 0) {
        fprintf(stderr,
                "kvmesh admin activate: member %s is draining because it is leaving (SIGTERM of "
                "its kvmeshd, or kvmesh_drain), not by an operator's drain; activate cannot stop "
                "that\n",
                m.id);
        return CLI_EXIT_FAIL;
    }
    if ((rc = kvmesh_admin_lifecycle_request(x->a, m.id, want)) != 0) {
        cli_report("admin", "writing the lifecycle request", rc);
        return CLI_EXIT_FAIL;
    }
    uint64_t t0 = kvmesh_tools_now_ns(), waited = 0;
    bool applied = strcmp(m.state, want) == 0, gone = false;
    while (!applied && !gone && waited < x->wait_ms) {
        sleep_ms(ADM_POLL_MS);
        found = false;
        if ((rc = kvmesh_admin_member_get(x->a, m.id, &m, &found)) != 0) {
            cli_report("admin", "reading the member record", rc);
            return CLI_EXIT_FAIL;
        }
        gone = !found || m.malformed;
        applied = !gone && strcmp(m.state, want) == 0;
        waited = (kvmesh_tools_now_ns() - t0) / 1000000u;
    }
    if (x->json) {
        printf("{\"member\":");
        admin_json_str(m.id);
        printf(",\"request\":\"%s\",\"state\":", want);
        admin_json_str(gone ? "gone" : m.state);
        printf(",\"applied\":%s,\"waited_ms\":%" PRIu64 "}\n", applied ? "true" : "false", waited);
    } else if (applied) {
        printf("member %s: %s (%s)\n", m.id, want,
               drain ? "takes no new placements; its objects stay readable; kvmesh admin "
                       "activate reverses it"
                     : "takes placements again");
    }
    if (applied)
        return CLI_EXIT_OK;
    if (gone)
        fprintf(stderr,
                "kvmesh admin %s: the member record of %s went away while waiting (the member "
                "left or its lease expired); the request is kept for its id\n",
                x->sub, m.id);
    else if (x->wait_ms == 0)
        fprintf(stderr,
                "kvmesh admin %s: request for %s recorded; not waiting (--wait-ms 0): the member "
                "applies it at its next heartbeat\n",
                x->sub, m.id);
    else
        fprintf(stderr,
                "kvmesh admin %s: request for %s recorded, but its record still says %s after "
                "%" PRIu64 " ms; the member applies requests at each heartbeat (is it running and "
                "connected to the metadata?)\n",
                x->sub, m.id, m.state, waited);
    return x->wait_ms == 0 && !gone ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

/* ---- segment lifecycle ---------------------------------------------------------------------- */

/* The segment of member m named by arg (16 hex digits, or a unique prefix of its id). Returns
 * its index, or a negative exit status (message printed, except for -CLI_EXIT_ENOENT). */
static int resolve_segment(const struct adm *x, const kvmesh_admin_member_t *m, const char *arg)
{
    size_t n = strlen(arg);
    bool hex = n >= 1 && n <= 16;
    for (size_t i = 0; hex && i < n; i++)
        hex = (arg[i] >= '0' && arg[i] <= '9') || (arg[i] >= 'a' && arg[i] <= 'f') ||
              (arg[i] >= 'A' && arg[i] <= 'F');
    if (!hex) {
        fprintf(stderr,
                "kvmesh admin segments %s: \"%s\" is not a segment id (16 hex digits, or a "
                "unique prefix of one; see kvmesh admin segments)\n",
                x->op_seg, arg);
        return -CLI_EXIT_USAGE;
    }
    int hit = -1;
    for (uint32_t k = 0; k < m->n_segments; k++) {
        char id[17];
        snprintf(id, sizeof(id), "%016" PRIx64, m->segments[k].id);
        if (strncasecmp(id, arg, n) != 0)
            continue;
        if (hit >= 0) {
            fprintf(stderr,
                    "kvmesh admin segments %s: \"%s\" matches more than one segment of member "
                    "%s; give more digits\n",
                    x->op_seg, arg, m->id);
            return -CLI_EXIT_USAGE;
        }
        hit = (int)k;
    }
    if (hit < 0)
        return -CLI_EXIT_ENOENT; /* the caller says so */
    return hit;
}

/* segments drain|activate MEMBER SEGMENT: adds the segment to (or removes it from) the
 * member's request record, then waits up to --wait-ms for the member record to show it. */
static int do_segment_lifecycle(struct adm *x, const char *marg, const char *sarg)
{
    bool drain = strcmp(x->op_seg, "drain") == 0;
    const char *want = drain ? "drained" : "active";
    kvmesh_admin_member_t m;
    int ret = resolve_member(x, marg, &m);
    if (ret)
        return ret;
    int k = resolve_segment(x, &m, sarg);
    if (k == -CLI_EXIT_ENOENT && !drain && strlen(sarg) == 16) {
        /* a segment the member no longer has (a restart makes new segments): remove a request
         * left for it */
        uint64_t stale = strtoull(sarg, NULL, 16);
        kvmesh_admin_lifecycle_t l;
        bool found = false, listed = false;
        int rc = kvmesh_admin_lifecycle_read(x->a, m.id, &l, &found);
        for (uint32_t i = 0; rc == 0 && found && i < l.n_segments; i++)
            listed |= l.segments[i] == stale;
        if (rc == 0 && listed)
            rc = kvmesh_admin_segment_request(x->a, m.id, stale, false);
        if (rc) {
            cli_report("admin", "removing the segment request", rc);
            return CLI_EXIT_FAIL;
        }
        if (listed) {
            if (x->json)
                printf("{\"member\":\"%s\",\"segment\":\"%016" PRIx64 "\",\"request\":\"active\","
                       "\"state\":null,\"applied\":false,\"removed_request\":\"drained\"}\n",
                       m.id, stale);
            else
                printf("member %s has no segment %016" PRIx64 ": its drain request is removed\n",
                       m.id, stale);
            return CLI_EXIT_OK;
        }
    }
    if (k == -CLI_EXIT_ENOENT)
        fprintf(stderr,
                "kvmesh admin segments %s: member %s has no segment \"%s\" (it lists %u; see "
                "kvmesh admin segments)\n",
                x->op_seg, m.id, sarg, m.n_segments);
    if (k < 0)
        return -k;
    uint64_t seg = m.segments[k].id;
    if (strcmp(m.state, "gone") == 0) {
        fprintf(stderr,
                "kvmesh admin segments %s: member %s is gone; it applies no more requests\n",
                x->op_seg, m.id);
        return CLI_EXIT_FAIL;
    }
    int rc = kvmesh_admin_segment_request(x->a, m.id, seg, drain);
    if (rc) {
        cli_report("admin", "writing the segment request", rc);
        return CLI_EXIT_FAIL;
    }
    uint64_t t0 = kvmesh_tools_now_ns(), waited = 0;
    bool applied = m.segments[k].drained == drain, gone = false;
    while (!applied && !gone && waited < x->wait_ms) {
        sleep_ms(ADM_POLL_MS);
        bool found = false;
        if ((rc = kvmesh_admin_member_get(x->a, m.id, &m, &found)) != 0) {
            cli_report("admin", "reading the member record", rc);
            return CLI_EXIT_FAIL;
        }
        gone = !found || m.malformed;
        int idx = -1;
        for (uint32_t i = 0; !gone && i < m.n_segments; i++)
            if (m.segments[i].id == seg)
                idx = (int)i;
        gone |= idx < 0; /* the segment was removed (storage resize) */
        applied = !gone && m.segments[idx].drained == drain;
        waited = (kvmesh_tools_now_ns() - t0) / 1000000u;
    }
    if (x->json) {
        printf("{\"member\":");
        admin_json_str(m.id);
        printf(",\"segment\":\"%016" PRIx64 "\",\"request\":\"%s\",\"state\":\"%s\","
               "\"applied\":%s,\"waited_ms\":%" PRIu64 "}\n",
               seg, want,
               gone      ? "gone"
               : applied ? want
                         : (drain ? "active" : "drained"),
               applied ? "true" : "false", waited);
    } else if (applied) {
        printf("segment %016" PRIx64 " of member %s: %s (%s)\n", seg, m.id, want,
               drain ? "takes no new placements; its objects stay readable where they are; "
                       "kvmesh admin segments activate reverses it"
                     : "takes placements again");
    }
    if (applied)
        return CLI_EXIT_OK;
    if (gone)
        fprintf(stderr,
                "kvmesh admin segments %s: member %s or its segment %016" PRIx64
                " went away while waiting; the request is kept in its record\n",
                x->op_seg, m.id, seg);
    else if (x->wait_ms == 0)
        fprintf(stderr,
                "kvmesh admin segments %s: request for segment %016" PRIx64 " of %s recorded; "
                "not waiting (--wait-ms 0): the member applies it at its next heartbeat\n",
                x->op_seg, seg, m.id);
    else
        fprintf(stderr,
                "kvmesh admin segments %s: request for segment %016" PRIx64 " of %s recorded, "
                "but its record does not show it %s after %" PRIu64 " ms; the member applies "
                "requests at each heartbeat (is it running and connected to the metadata?)\n",
                x->op_seg, seg, m.id, want, waited);
    return x->wait_ms == 0 && !gone ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

/* ---- tenants and quotas --------------------------------------------------------------------- */

static void size_str(uint64_t v, char *buf, size_t cap)
{
    kvmesh_tools_format_size(v, buf, cap);
}

static void tenant_json(const kvmesh_admin_tenant_t *t)
{
    printf("{\"tenant\":");
    admin_json_str(t->tenant);
    if (t->malformed) {
        printf(",\"malformed\":true}");
        return;
    }
    printf(",\"schema_version\":%u,\"policy_version\":%u,\"max_bytes\":%" PRIu64
           ",\"max_objects\":%" PRIu64 ",\"fingerprint\":\"%016" PRIx64 "\",\"usage\":",
           t->schema_version, t->policy_version, t->max_bytes, t->max_objects, t->fingerprint);
    if (!t->has_usage || t->usage_malformed)
        printf("%s", t->usage_malformed ? "{\"malformed\":true}" : "null");
    else
        printf("{\"used_bytes\":%" PRIu64 ",\"used_objects\":%" PRIu64
               ",\"committed_bytes\":%" PRIu64 ",\"committed_objects\":%" PRIu64
               ",\"pending_bytes\":%" PRIu64 ",\"pending_objects\":%" PRIu64
               ",\"ops_pending\":%" PRIu64 ",\"ops_publishing\":%" PRIu64 "}",
               t->committed_bytes + t->pending_bytes, t->committed_objects + t->pending_objects,
               t->committed_bytes, t->committed_objects, t->pending_bytes, t->pending_objects,
               t->ops_pending, t->ops_publishing);
    printf("}");
}

static void tenant_row(const kvmesh_admin_tenant_t *t)
{
    if (t->malformed) {
        printf("%-24s (malformed policy record)\n", t->tenant);
        return;
    }
    char mb[32], ub[32], pb[32];
    size_str(t->max_bytes, mb, sizeof(mb));
    size_str(t->committed_bytes + t->pending_bytes, ub, sizeof(ub));
    size_str(t->pending_bytes, pb, sizeof(pb));
    printf("%-24s %7u %12s %12" PRIu64 " %12s %12" PRIu64 " %10s %8" PRIu64 " %10" PRIu64
           "  %016" PRIx64 "%s\n",
           t->tenant, t->policy_version, mb, t->max_objects, ub,
           t->committed_objects + t->pending_objects, pb, t->ops_pending, t->ops_publishing,
           t->fingerprint,
           !t->has_usage        ? "  (no usage row)"
           : t->usage_malformed ? "  (malformed usage row)"
                                : "");
}

/* `admin policy`: the policy record alone (no usage row). */
static void policy_json(const kvmesh_admin_tenant_t *t)
{
    printf("{\"tenant\":");
    admin_json_str(t->tenant);
    if (t->malformed) {
        printf(",\"malformed\":true}");
        return;
    }
    printf(",\"schema_version\":%u,\"policy_version\":%u,\"max_bytes\":%" PRIu64
           ",\"max_objects\":%" PRIu64 ",\"fingerprint\":\"%016" PRIx64 "\"}",
           t->schema_version, t->policy_version, t->max_bytes, t->max_objects, t->fingerprint);
}

static void policy_header(void)
{
    printf("%-24s %6s %7s %12s %12s  %s\n", "tenant", "schema", "policy", "max bytes",
           "max objects", "fingerprint");
}

static void policy_row(const kvmesh_admin_tenant_t *t)
{
    if (t->malformed) {
        printf("%-24s (malformed policy record)\n", t->tenant);
        return;
    }
    char mb[32];
    kvmesh_tools_format_size(t->max_bytes, mb, sizeof(mb));
    printf("%-24s %6u %7u %12s %12" PRIu64 "  %016" PRIx64 "\n", t->tenant, t->schema_version,
           t->policy_version, mb, t->max_objects, t->fingerprint);
}

static void tenant_header(void)
{
    printf("%-24s %7s %12s %12s %12s %12s %10s %8s %10s  %s\n", "tenant", "policy", "max bytes",
           "max objects", "used bytes", "used objects", "pending", "reserved", "publishing",
           "fingerprint");
}

/* ---- one record or a paged listing of a kind (tenant policies, cold devices) --------------- */

#define ADM_CURSOR_MAX 72 /* the longest record name a listing resumes after, and a NUL */

struct listing {
    const char *one_noun;   /* "tenant", "device": what an EINVAL names */
    const char *read_what;  /* "reading tenant policies": a failed page */
    const char *json_array; /* "policies": the document's array */
    const char *singular, *plural;
    size_t item_size;
    /* one record (exact read) into item; *found false when there is none */
    int (*get)(kvmesh_admin_t *a, const char *name, void *item, bool *found);
    void (*not_found)(const struct adm *x, const char *name);
    /* a page after `after` into items */
    int (*page)(kvmesh_admin_t *a, const char *after, size_t limit, void *items, size_t *n,
                bool *more);
    const char *(*name)(const void *item); /* the page cursor of an item */
    void (*json)(const void *item);
    void (*row)(const void *item);
    void (*header)(void);
};

/* `one` alone (an exact read; exit 3 when absent), or every record in pages of --page, at
 * most --max, as JSON ({"<array>":[...],"count","truncated"}) or a table with a count line. */
static int do_listing(struct adm *x, const struct listing *l, const char *one)
{
    int rc;
    void *item = calloc(x->page > 0 ? (size_t)x->page : 1, l->item_size);
    if (!item)
        return CLI_EXIT_FAIL;
    if (one) {
        bool found = false;
        if ((rc = l->get(x->a, one, item, &found)) != 0) {
            free(item);
            cli_report("admin", rc == KVMESH_EINVAL ? l->one_noun : l->read_what, rc);
            return rc == KVMESH_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        }
        if (!found) {
            free(item);
            l->not_found(x, one);
            return CLI_EXIT_ENOENT;
        }
        if (x->json) {
            l->json(item);
            printf("\n");
        } else {
            l->header();
            l->row(item);
        }
        free(item);
        return 0;
    }
    if (x->json)
        printf("{\"%s\":[", l->json_array);
    else
        l->header();
    char after[ADM_CURSOR_MAX] = "";
    size_t shown = 0;
    bool truncated = false;
    rc = 0;
    for (;;) {
        if (shown >= x->max) {
            truncated = true;
            break;
        }
        size_t want = x->page < x->max - shown ? (size_t)x->page : (size_t)(x->max - shown);
        size_t got = 0;
        bool more = false;
        if ((rc = l->page(x->a, after, want, item, &got, &more)) != 0)
            break;
        for (size_t i = 0; i < got; i++) {
            const void *it = (const char *)item + i * l->item_size;
            if (x->json) {
                printf("%s", shown ? "," : "");
                l->json(it);
            } else {
                l->row(it);
            }
            shown++;
        }
        if (!more || got == 0)
            break;
        snprintf(after, sizeof(after), "%s",
                 l->name((const char *)item + (got - 1) * l->item_size));
    }
    free(item);
    if (rc) {
        if (x->json)
            printf("]}\n");
        cli_report("admin", l->read_what, rc);
        return CLI_EXIT_FAIL;
    }
    if (x->json)
        printf("],\"count\":%zu,\"truncated\":%s}\n", shown, truncated ? "true" : "false");
    else
        printf("%zu %s%s\n", shown, shown == 1 ? l->singular : l->plural,
               truncated ? " (stopped at --max; more records exist)" : "");
    return 0;
}

static int tenant_get(kvmesh_admin_t *a, const char *name, void *item, bool *found)
{
    return kvmesh_admin_tenant_get(a, name, item, found);
}
static int tenant_page(kvmesh_admin_t *a, const char *after, size_t limit, void *items, size_t *n,
                       bool *more)
{
    return kvmesh_admin_tenants(a, after, limit, items, n, more);
}
static const char *tenant_name(const void *item)
{
    return ((const kvmesh_admin_tenant_t *)item)->tenant;
}
static void tenant_not_found(const struct adm *x, const char *name, const char *verb)
{
    fprintf(stderr,
            "kvmesh admin %s: tenant \"%s\" has no policy in deployment %s (see kvmesh admin "
            "tenants)\n",
            verb, name, kvmesh_tools_config_str(x->cfg, "deployment"));
}
static void tenants_not_found(const struct adm *x, const char *name)
{
    tenant_not_found(x, name, "tenants");
}
static void policy_not_found(const struct adm *x, const char *name)
{
    tenant_not_found(x, name, "policy get");
}
static void tenant_json_v(const void *t)
{
    tenant_json(t);
}
static void tenant_row_v(const void *t)
{
    tenant_row(t);
}
static void policy_json_v(const void *t)
{
    policy_json(t);
}
static void policy_row_v(const void *t)
{
    policy_row(t);
}

static int do_tenants(struct adm *x, const char *one, bool policy)
{
    _Static_assert(KVMESH_ADMIN_TENANT_LEN < ADM_CURSOR_MAX, "a tenant name is a cursor");
    const struct listing l = {
        .one_noun = "tenant",
        .read_what = one ? "reading the tenant policy" : "reading tenant policies",
        .json_array = policy ? "policies" : "tenants",
        .singular = "tenant policy",
        .plural = "tenant policies",
        .item_size = sizeof(kvmesh_admin_tenant_t),
        .get = tenant_get,
        .not_found = policy ? policy_not_found : tenants_not_found,
        .page = tenant_page,
        .name = tenant_name,
        .json = policy ? policy_json_v : tenant_json_v,
        .row = policy ? policy_row_v : tenant_row_v,
        .header = policy ? policy_header : tenant_header,
    };
    return do_listing(x, &l, one);
}

/* ---- cold devices ---- */

static void device_json(const kvmesh_admin_device_t *d)
{
    printf("{\"id\":");
    admin_json_str(d->id);
    if (d->malformed) {
        printf(",\"malformed\":true}");
        return;
    }
    printf(",\"owner\":");
    admin_json_str(d->owner);
    printf(",\"owner_epoch\":%" PRIu64 ",\"kind\":", d->owner_epoch);
    admin_json_str(d->kind);
    printf(",\"root\":");
    admin_json_str(d->root);
    printf(",\"lifecycle\":");
    admin_json_str(d->lifecycle);
    printf(",\"schedulable\":%s,\"health\":", d->schedulable ? "true" : "false");
    admin_json_str(d->health);
    printf(",\"health_ms\":%" PRIu64 ",\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
           ",\"reserved_bytes\":%" PRIu64 ",\"free_bytes\":%" PRIu64 ",\"ops_used\":%" PRIu64
           ",\"ops_reserved\":%" PRIu64 ",\"tags\":",
           d->health_ms, d->capacity, d->used, d->reserved,
           d->capacity -
               (d->used + d->reserved <= d->capacity ? d->used + d->reserved : d->capacity),
           d->n_used, d->n_reserved);
    admin_json_str(d->tags);
    printf("}");
}

static void device_header(void)
{
    printf("%-32s %-32s %-8s %-9s %-8s %5s %10s %10s %10s  %s\n", "device", "owner", "kind",
           "lifecycle", "health", "sched", "capacity", "used", "reserved", "root");
}

static void device_row(const kvmesh_admin_device_t *d)
{
    if (d->malformed) {
        printf("%-32s (malformed record)\n", d->id);
        return;
    }
    char cap[32], used[32], res[32];
    kvmesh_tools_format_size(d->capacity, cap, sizeof(cap));
    kvmesh_tools_format_size(d->used, used, sizeof(used));
    kvmesh_tools_format_size(d->reserved, res, sizeof(res));
    printf("%-32s %-32s %-8s %-9s %-8s %5s %10s %10s %10s  %s\n", d->id, d->owner, d->kind,
           d->lifecycle, d->health, d->schedulable ? "yes" : "no", cap, used, res, d->root);
}

static int device_get(kvmesh_admin_t *a, const char *name, void *item, bool *found)
{
    return kvmesh_admin_device_get(a, name, item, found);
}
static int device_page(kvmesh_admin_t *a, const char *after, size_t limit, void *items, size_t *n,
                       bool *more)
{
    return kvmesh_admin_devices(a, after, limit, items, n, more);
}
static const char *device_name(const void *item)
{
    return ((const kvmesh_admin_device_t *)item)->id;
}
static void device_not_found(const struct adm *x, const char *name)
{
    fprintf(stderr,
            "kvmesh admin devices: no cold device %s in deployment %s (see kvmesh admin "
            "devices)\n",
            name, kvmesh_tools_config_str(x->cfg, "deployment"));
}
static void device_json_v(const void *d)
{
    device_json(d);
}
static void device_row_v(const void *d)
{
    device_row(d);
}

static int do_devices(struct adm *x, const char *one)
{
    _Static_assert(KVMESH_ID_HEX_LEN < ADM_CURSOR_MAX, "a device id is a cursor");
    const struct listing l = {
        .one_noun = "device",
        .read_what = one ? "reading the device record" : "reading cold device records",
        .json_array = "devices",
        .singular = "cold device",
        .plural = "cold devices",
        .item_size = sizeof(kvmesh_admin_device_t),
        .get = device_get,
        .not_found = device_not_found,
        .page = device_page,
        .name = device_name,
        .json = device_json_v,
        .row = device_row_v,
        .header = device_header,
    };
    return do_listing(x, &l, one);
}

struct qops {
    kvmesh_admin_qop_t *v;
    size_t n;
    bool truncated;
};

/* The tenant's non-terminal operations from its due index (pending, then publishing), in
 * pages, at most --max in all. */
static int fetch_qops(struct adm *x, const char *tenant, struct qops *q)
{
    static const char *const states[] = {"pending", "publishing"};
    memset(q, 0, sizeof(*q));
    char *cursor = malloc(KVMESH_ADMIN_CURSOR_CAP), *next = malloc(KVMESH_ADMIN_CURSOR_CAP);
    int rc = cursor && next ? 0 : KVMESH_ENOMEM;
    size_t cap = 0;
    for (size_t s = 0; rc == 0 && s < 2 && !q->truncated; s++) {
        cursor[0] = 0;
        for (;;) {
            if (q->n >= x->max) {
                q->truncated = true;
                break;
            }
            size_t want = x->page < x->max - q->n ? (size_t)x->page : (size_t)(x->max - q->n);
            if (q->n + want > cap) {
                size_t nc = cap ? cap * 2 : 64;
                while (nc < q->n + want)
                    nc *= 2;
                kvmesh_admin_qop_t *nv = realloc(q->v, nc * sizeof(*nv));
                if (!nv) {
                    rc = KVMESH_ENOMEM;
                    break;
                }
                q->v = nv;
                cap = nc;
            }
            size_t got = 0;
            bool more = false;
            rc = kvmesh_admin_quota_ops(x->a, tenant, states[s], cursor, want, q->v + q->n, &got,
                                        &more, next);
            if (rc)
                break;
            q->n += got;
            if (!more || got == 0)
                break;
            snprintf(cursor, KVMESH_ADMIN_CURSOR_CAP, "%s", next);
        }
    }
    free(cursor);
    free(next);
    return rc;
}

static void qop_json(const kvmesh_admin_qop_t *o)
{
    printf("{\"id\":");
    admin_json_str(o->id);
    printf(",\"due_state\":\"%s\",\"deadline_ms\":%" PRIu64 ",\"expired\":%s", o->due_state,
           o->deadline_ms, o->expired ? "true" : "false");
    if (o->missing || o->malformed) {
        printf(",\"%s\":true}", o->missing ? "missing" : "malformed");
        return;
    }
    printf(",\"state\":\"%s\",\"kind\":\"%s\",\"domain\":", o->state, o->kind);
    admin_json_str(o->domain);
    printf(",\"key\":");
    admin_json_str(o->key);
    printf(",\"delta_bytes\":%" PRId64 ",\"delta_objects\":%" PRId64 ",\"next_len\":%" PRIu64
           ",\"recon_attempts\":%u}",
           o->delta_bytes, o->delta_objects, o->next_len, o->recon_attempts);
}

static void qop_row(const kvmesh_admin_qop_t *o, uint64_t now_ms, const char *note)
{
    long long left = (long long)o->deadline_ms - (long long)now_ms;
    char due[32];
    if (o->expired)
        snprintf(due, sizeof(due), "expired %llds", (-left) / 1000);
    else
        snprintf(due, sizeof(due), "in %llds", left / 1000);
    if (o->missing || o->malformed) {
        printf("  %s %-10s %-14s (%s operation record)%s\n", o->id, o->due_state, due,
               o->missing ? "no" : "malformed", note);
        return;
    }
    printf("  %s %-10s %-14s %-9s %+" PRId64 " B %+" PRId64 " obj  %s/%.60s%s%s\n", o->id, o->state,
           due, o->kind, o->delta_bytes, o->delta_objects, o->domain[0] ? o->domain : "~", o->key,
           o->recon_attempts ? " (retried)" : "", note);
}

/* Which operations `abort` takes: expired PENDING ones, or exactly --op. */
static bool abort_candidate(const struct adm *x, const kvmesh_admin_qop_t *o)
{
    if (o->missing || o->malformed || strcmp(o->state, "pending") != 0)
        return false;
    return x->op ? strcmp(o->id, x->op) == 0 : o->expired;
}

static int quota_reconcile_apply(struct adm *x, const kvmesh_admin_tenant_t *t,
                                 kvmesh_tools_recon_t *r)
{
    char pol[256];
    snprintf(pol, sizeof(pol), "%s:%" PRIu64 ":%" PRIu64 ":%u", t->tenant, t->max_bytes,
             t->max_objects, t->policy_version);
    if (kvmesh_config_set(x->cfg, "memory_size", "0") != 0 ||
        kvmesh_config_set(x->cfg, "tenant_policies", pol) != 0 ||
        kvmesh_config_set(x->cfg, "admin_listen", "") != 0) {
        cli_report("admin", "configuring the reconciling runtime", KVMESH_ECONFIG);
        return CLI_EXIT_FAIL;
    }
    kvmesh_t *kv = NULL;
    int rc = kvmesh_open(&kv, x->cfg);
    if (rc) {
        fprintf(stderr,
                "kvmesh admin quota: cannot join deployment \"%s\" to reconcile: %s: %s (give "
                "the deployment's config with --config)\n",
                kvmesh_tools_config_str(x->cfg, "deployment"), kvmesh_strerror(rc),
                kvmesh_last_error());
        return CLI_EXIT_FAIL;
    }
    rc = kvmesh_tools_quota_reconcile(kv, t->tenant, r);
    if (rc)
        cli_report("admin", "reconciliation pass", rc);
    kvmesh_close(kv);
    return rc ? CLI_EXIT_FAIL : 0;
}

static int do_quota(struct adm *x, const char *tenant, const char *action)
{
    kvmesh_admin_tenant_t t;
    bool found = false;
    int rc = kvmesh_admin_tenant_get(x->a, tenant, &t, &found);
    if (rc) {
        cli_report("admin", rc == KVMESH_EINVAL ? "tenant" : "reading the tenant policy", rc);
        return rc == KVMESH_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    if (!found) {
        fprintf(stderr,
                "kvmesh admin quota: tenant \"%s\" has no policy in deployment %s (see kvmesh "
                "admin tenants)\n",
                tenant, kvmesh_tools_config_str(x->cfg, "deployment"));
        return CLI_EXIT_ENOENT;
    }
    if (t.malformed) {
        fprintf(stderr, "kvmesh admin quota: the policy record of \"%s\" is malformed\n", tenant);
        return CLI_EXIT_FAIL;
    }
    struct qops q;
    if ((rc = fetch_qops(x, tenant, &q)) != 0) {
        free(q.v);
        cli_report("admin", "reading the due index", rc);
        return CLI_EXIT_FAIL;
    }
    uint64_t now = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    }
    size_t expired = 0;
    for (size_t i = 0; i < q.n; i++)
        expired += q.v[i].expired;
    int ret = 0;
    if (!action) { /* usage and reservations */
        if (x->json) {
            printf("{\"tenant\":");
            tenant_json(&t);
            printf(",\"operations\":[");
            for (size_t i = 0; i < q.n; i++) {
                printf("%s", i ? "," : "");
                qop_json(&q.v[i]);
            }
            printf("],\"count\":%zu,\"backlog\":%zu,\"truncated\":%s}\n", q.n, expired,
                   q.truncated ? "true" : "false");
        } else {
            tenant_header();
            tenant_row(&t);
            printf("%zu non-terminal operation(s) (reservations) in the due index, %zu past their "
                   "deadline (reconciliation backlog)%s%s\n",
                   q.n, expired, q.truncated ? " (stopped at --max; more exist)" : "",
                   q.n ? ":" : "");
            for (size_t i = 0; i < q.n; i++)
                qop_row(&q.v[i], now, "");
        }
    } else if (strcmp(action, "abort") == 0) {
        size_t cand = 0, done = 0;
        if (x->json)
            printf("{\"tenant\":\"%s\",\"apply\":%s,\"operations\":[", tenant,
                   x->apply ? "true" : "false");
        else
            printf("%s\n", x->apply ? "abort (--apply): aborting pending reservations"
                                    : "abort dry run (nothing is changed; --apply aborts):");
        for (size_t i = 0; i < q.n; i++) {
            const kvmesh_admin_qop_t *o = &q.v[i];
            if (!abort_candidate(x, o))
                continue;
            char err[300] = "";
            bool ok = false;
            if (x->apply) {
                int e = kvmesh_admin_quota_abort(x->a, tenant, o->domain, o->key, o->id);
                ok = e == 0;
                if (e) {
                    snprintf(err, sizeof(err), "%s", kvmesh_last_error());
                    ret = CLI_EXIT_FAIL;
                }
            }
            done += ok;
            if (x->json) {
                printf("%s{\"op\":", cand ? "," : "");
                qop_json(o);
                printf(",\"aborted\":%s", ok ? "true" : "false");
                if (err[0]) {
                    printf(",\"error\":");
                    admin_json_str(err);
                }
                printf("}");
            } else {
                qop_row(o, now,
                        !x->apply ? " -> would abort"
                        : ok      ? " -> aborted"
                                  : " -> NOT aborted");
                if (err[0])
                    printf("     %s\n", err);
            }
            cand++;
        }
        if (x->op && cand == 0) {
            if (x->json)
                printf("]}\n");
            fprintf(stderr,
                    "kvmesh admin quota: operation %s is not a pending reservation of tenant "
                    "\"%s\" (see kvmesh admin quota %s)\n",
                    x->op, tenant, tenant);
            free(q.v);
            return CLI_EXIT_ENOENT;
        }
        if (x->json)
            printf("],\"candidates\":%zu,\"aborted\":%zu}\n", cand, done);
        else
            printf("%zu pending reservation(s) %s%s\n", cand,
                   x->op ? "named by --op" : "past their deadline", x->apply ? "" : " (dry run)");
        if (!x->json && x->apply)
            printf("%zu aborted\n", done);
    } else { /* reconcile */
        size_t due_pending = 0, due_publishing = 0;
        for (size_t i = 0; i < q.n; i++)
            if (q.v[i].expired)
                *(strcmp(q.v[i].due_state, "pending") == 0 ? &due_pending : &due_publishing) += 1;
        kvmesh_tools_recon_t r;
        memset(&r, 0, sizeof(r));
        size_t due_after = 0;
        if (x->apply && (ret = quota_reconcile_apply(x, &t, &r)) == 0) {
            struct qops after;
            if (fetch_qops(x, tenant, &after) != 0) {
                cli_report("admin", "reading the due index after the pass", KVMESH_EIO);
                ret = CLI_EXIT_FAIL;
            }
            for (size_t i = 0; i < after.n; i++)
                due_after += after.v[i].expired;
            free(after.v);
        }
        if (x->json) {
            printf("{\"tenant\":\"%s\",\"apply\":%s,\"due\":[", tenant,
                   x->apply ? "true" : "false");
            size_t k = 0;
            for (size_t i = 0; i < q.n; i++)
                if (q.v[i].expired) {
                    printf("%s", k++ ? "," : "");
                    qop_json(&q.v[i]);
                }
            printf("],\"due_pending\":%zu,\"due_publishing\":%zu", due_pending, due_publishing);
            if (x->apply && ret == 0)
                printf(",\"pass\":{\"rc\":%d,\"aborted\":%u,\"finalized\":%u,\"replayed\":%u,"
                       "\"degraded\":%u,\"purged\":%u,\"more\":%s},\"runtime_total\":{"
                       "\"aborted\":%" PRIu64 ",\"finalized\":%" PRIu64 ",\"replayed\":%" PRIu64
                       ",\"degraded\":%" PRIu64 ",\"purged\":%" PRIu64 "},\"due_after\":%zu",
                       r.rc, r.aborted, r.finalized, r.replayed, r.degraded, r.purged,
                       r.more ? "true" : "false", r.total_aborted, r.total_finalized,
                       r.total_replayed, r.total_degraded, r.total_purged, due_after);
            printf("}\n");
        } else {
            printf("%s\n", x->apply ? "reconcile (--apply): one pass through a client runtime"
                                    : "reconcile dry run (nothing is changed; --apply runs one "
                                      "pass):");
            for (size_t i = 0; i < q.n; i++)
                if (q.v[i].expired)
                    qop_row(&q.v[i], now,
                            strcmp(q.v[i].due_state, "pending") == 0
                                ? " -> abort (expired pending)"
                                : " -> exact route lookup: finalize if published, else stays "
                                  "charged (degraded)");
            printf("%zu due pending, %zu due publishing%s\n", due_pending, due_publishing,
                   x->apply ? "" : " (dry run)");
            if (x->apply && ret == 0)
                printf("reconciled by this command's runtime: %" PRIu64 " aborted, %" PRIu64
                       " finalized (%" PRIu64 " replayed), %" PRIu64 " degraded, %" PRIu64
                       " purged%s%s; %zu due entr%s left\n",
                       r.total_aborted, r.total_finalized, r.total_replayed, r.total_degraded,
                       r.total_purged, r.more ? "; more due entries remain (run it again)" : "",
                       r.rc ? "; a metadata error ended its pass early" : "", due_after,
                       due_after == 1 ? "y" : "ies");
        }
    }
    free(q.v);
    return ret;
}

/* ---- subcommands --------------------------------------------------------------------------- */

static int do_members(struct adm *x, bool segments)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    struct requests rq;
    int rrc = fetch_requests(x, &rq);
    if (rrc) {
        cli_report("admin", "reading lifecycle requests", rrc);
        free(rq.v);
        free(m.v);
        return CLI_EXIT_FAIL;
    }
    if (x->json && segments) {
        printf("{\"segments\":[");
        size_t total = 0;
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            for (uint32_t k = 0; !e->malformed && k < e->n_segments; k++) {
                bool req = seg_requested(&rq, e->id, e->segments[k].id);
                printf("%s{\"member\":", total++ ? "," : "");
                admin_json_str(e->id);
                printf(",\"member_state\":");
                admin_json_str(e->state);
                printf(",\"id\":\"%016" PRIx64 "\",\"size_bytes\":%" PRIu64
                       ",\"state\":\"%s\",\"request\":%s}",
                       e->segments[k].id, e->segments[k].size,
                       e->segments[k].drained ? "drained" : "active", req ? "\"drained\"" : "null");
            }
        }
        printf("],\"count\":%zu,\"members\":%zu,\"truncated\":%s}\n", total, m.n,
               m.truncated ? "true" : "false");
    } else if (x->json) {
        printf("{\"members\":[");
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            printf("%s{\"id\":", i ? "," : "");
            admin_json_str(e->id);
            if (e->malformed) {
                printf(",\"malformed\":true}");
                continue;
            }
            printf(",\"epoch\":%" PRIu64 ",\"state\":", e->epoch);
            admin_json_str(e->state);
            printf(",\"weight\":%g,\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                   ",\"heartbeat\":%" PRIu64 ",\"rpc\":",
                   e->weight, e->capacity_bytes, e->used_bytes, e->heartbeat);
            admin_json_str(e->rpc);
            printf(",\"local_rpc\":"); /* rpc_local = unix; null when not published */
            if (e->local_rpc[0])
                admin_json_str(e->local_rpc);
            else
                printf("null");
            printf(",\"host\":");
            if (e->host[0])
                admin_json_str(e->host);
            else
                printf("null");
            printf(",\"data\":");
            admin_json_str(e->data);
            const char *req = request_of(&rq, e->id);
            printf(",\"lease\":%" PRId64 ",\"request\":", e->lease);
            if (req)
                admin_json_str(req);
            else
                printf("null");
            printf(",\"segments\":[");
            for (uint32_t k = 0; k < e->n_segments; k++)
                printf("%s{\"id\":\"%016" PRIx64 "\",\"size_bytes\":%" PRIu64 ",\"state\":\"%s\"}",
                       k ? "," : "", e->segments[k].id, e->segments[k].size,
                       e->segments[k].drained ? "drained" : "active");
            printf("]}");
        }
        printf("],\"count\":%zu,\"truncated\":%s,\"requests_without_member\":[", m.n,
               m.truncated ? "true" : "false");
        size_t k = 0;
        for (size_t i = 0; i < rq.n; i++)
            if (!find_member(&m, rq.v[i].id, 0) && !m.truncated && request_of(&rq, rq.v[i].id)) {
                printf("%s{\"id\":", k++ ? "," : "");
                admin_json_str(rq.v[i].id);
                printf(",\"request\":");
                admin_json_str(rq.v[i].state);
                printf("}");
            }
        printf("]}\n");
    } else if (!segments) {
        printf("%-32s %6s %-9s %7s %12s %12s %9s  %s\n", "id", "epoch", "state", "weight",
               "capacity", "used", "segments", "rpc");
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            if (e->malformed) {
                printf("%-32s (malformed record)\n", e->id);
                continue;
            }
            char cap[32], used[32];
            kvmesh_tools_format_size(e->capacity_bytes, cap, sizeof(cap));
            kvmesh_tools_format_size(e->used_bytes, used, sizeof(used));
            const char *req = request_of(&rq, e->id);
            bool pending = req && strcmp(req, e->state) != 0;
            printf("%-32s %6" PRIu64 " %-9s %7.3g %12s %12s %9u  %s%s%s%s%s%s%s%s\n", e->id,
                   e->epoch, e->state, e->weight, cap, used, e->n_segments, e->rpc,
                   e->local_rpc[0] ? " " : "", e->local_rpc, e->host[0] ? " host=" : "", e->host,
                   pending ? "  (requested: " : "", pending ? req : "", pending ? ")" : "");
        }
        printf("%zu member record(s)%s\n", m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
        for (size_t i = 0; i < rq.n && !m.truncated; i++)
            if (!find_member(&m, rq.v[i].id, 0) && request_of(&rq, rq.v[i].id))
                printf("lifecycle request %s for %s, which has no member record (applied when it "
                       "joins; kvmesh admin activate removes it)\n",
                       rq.v[i].state, rq.v[i].id);
    } else {
        printf("%-32s %-9s %-16s %12s  %s\n", "member", "state", "segment", "size",
               "segment state");
        size_t total = 0;
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            for (uint32_t k = 0; !e->malformed && k < e->n_segments; k++) {
                char sz[32];
                kvmesh_tools_format_size(e->segments[k].size, sz, sizeof(sz));
                bool req = seg_requested(&rq, e->id, e->segments[k].id);
                bool dr = e->segments[k].drained;
                printf("%-32s %-9s %016" PRIx64 " %12s  %s%s\n", e->id, e->state, e->segments[k].id,
                       sz, dr ? "drained" : "active",
                       req == dr ? ""
                       : req     ? "  (requested: drained)"
                                 : "  (requested: active)");
                total++;
            }
        }
        printf("%zu segment(s) of %zu member record(s)%s\n", total, m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
    }
    free(rq.v);
    free(m.v);
    return 0;
}

static int do_shards(struct adm *x)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    int rc = 0;
    kvmesh_admin_shard_t *page = calloc((size_t)x->page, sizeof(*page));
    if (!page) {
        free(m.v);
        return CLI_EXIT_FAIL;
    }
    if (x->json)
        printf("{\"shards\":[");
    else
        printf("%6s %-12s %10s %8s %-32s %-5s %s\n", "shard", "state", "generation", "token",
               "primary", "live", "authority set");
    uint32_t next = 0;
    size_t shown = 0;
    bool truncated = false;
    for (;;) {
        if (shown >= x->max) {
            truncated = true; /* the last page said more records follow */
            break;
        }
        size_t want = x->page < x->max - shown ? (size_t)x->page : (size_t)(x->max - shown);
        size_t got = 0;
        bool more = false;
        rc = kvmesh_admin_shards(x->a, next, want, page, &got, &more);
        if (rc)
            break;
        for (size_t i = 0; i < got; i++) {
            const kvmesh_admin_shard_t *s = &page[i];
            bool live = !s->malformed && find_member(&m, s->primary, s->primary_epoch) != NULL;
            if (x->json) {
                printf("%s{\"shard\":%u", shown ? "," : "", s->shard);
                if (s->malformed) {
                    printf(",\"malformed\":true}");
                } else {
                    printf(",\"state\":\"%s\",\"generation\":%" PRIu64 ",\"token\":%" PRIu64
                           ",\"primary\":\"%s\",\"primary_epoch\":%" PRIu64
                           ",\"primary_live\":%s,\"set\":[",
                           s->state, s->generation, s->token, s->primary, s->primary_epoch,
                           live ? "true" : "false");
                    for (uint32_t k = 0; k < s->n_set; k++)
                        printf("%s\"%s\"", k ? "," : "", s->set[k]);
                    printf("]}");
                }
            } else if (s->malformed) {
                printf("%6u (malformed record)\n", s->shard);
            } else {
                printf("%6u %-12s %10" PRIu64 " %8" PRIu64 " %-32s %-5s", s->shard, s->state,
                       s->generation, s->token, s->primary, live ? "yes" : "NO");
                for (uint32_t k = 0; k < s->n_set; k++)
                    printf("%s%.8s", k ? "," : " ", s->set[k]);
                printf("\n");
            }
            shown++;
        }
        if (!more || got == 0)
            break;
        next = page[got - 1].shard + 1;
    }
    free(page);
    free(m.v);
    if (rc) {
        if (x->json)
            printf("]}\n");
        cli_report("admin", "reading shard records", rc);
        return CLI_EXIT_FAIL;
    }
    if (x->json)
        printf("],\"count\":%zu,\"truncated\":%s}\n", shown, truncated ? "true" : "false");
    else
        printf("%zu shard record(s)%s\n", shown,
               truncated ? " (stopped at --max; more records exist)" : "");
    return 0;
}

static int do_cleanup(struct adm *x)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    int rc = 0;
    if (x->json)
        printf("{\"apply\":%s,\"stale_members\":[", x->apply ? "true" : "false");
    else
        printf("%s\n", x->apply ? "cleanup (--apply): deleting stale member records"
                                : "cleanup dry run (nothing is changed; --apply deletes):");
    size_t stale = 0, deleted = 0;
    int ret = 0;
    for (size_t i = 0; i < m.n; i++) {
        const kvmesh_admin_member_t *e = &m.v[i];
        bool alive = false;
        if ((rc = kvmesh_admin_lease_alive(x->a, e->lease, &alive)) != 0) {
            cli_report("admin", "lease check", rc);
            ret = CLI_EXIT_FAIL;
            break;
        }
        const char *why = e->malformed                    ? "malformed record"
                          : e->lease == 0                 ? "not bound to a lease"
                          : !alive                        ? "its lease has expired"
                          : strcmp(e->state, "gone") == 0 ? "state gone"
                                                          : NULL;
        if (!why)
            continue;
        stale++;
        bool del = false;
        if (x->apply && (rc = kvmesh_admin_member_delete(x->a, e->id, e->mod_rev, &del)) != 0) {
            cli_report("admin", e->id, rc);
            ret = CLI_EXIT_FAIL;
        }
        deleted += del;
        if (x->json) {
            printf("%s{\"id\":", stale > 1 ? "," : "");
            admin_json_str(e->id);
            printf(",\"reason\":\"%s\",\"deleted\":%s}", why, del ? "true" : "false");
        } else {
            printf("  member %s: %s%s\n", e->id, why,
                   !x->apply ? ""
                   : del     ? " -> deleted"
                             : " -> kept (changed since it was read)");
        }
    }
    /* Shard-authority records of primaries that are not live members. */
    kvmesh_admin_shard_t *page = calloc((size_t)x->page, sizeof(*page));
    size_t dead = 0, scanned = 0;
    uint32_t next = 0;
    if (x->json)
        printf("],\"dead_primaries\":[");
    while (page && ret == 0 && scanned < x->max) {
        size_t got = 0;
        bool more = false;
        size_t want = x->page < x->max - scanned ? (size_t)x->page : (size_t)(x->max - scanned);
        if ((rc = kvmesh_admin_shards(x->a, next, want, page, &got, &more)) != 0) {
            cli_report("admin", "reading shard records", rc);
            ret = CLI_EXIT_FAIL;
            break;
        }
        for (size_t i = 0; i < got; i++) {
            const kvmesh_admin_shard_t *s = &page[i];
            if (s->malformed || find_member(&m, s->primary, s->primary_epoch))
                continue;
            if (x->json)
                printf("%s{\"shard\":%u,\"primary\":\"%s\",\"primary_epoch\":%" PRIu64 "}",
                       dead ? "," : "", s->shard, s->primary, s->primary_epoch);
            else
                printf("  shard %u: primary %s epoch %" PRIu64
                       " is not a live member (record kept: the route service takes it over)\n",
                       s->shard, s->primary, s->primary_epoch);
            dead++;
        }
        scanned += got;
        if (!more || got == 0)
            break;
        next = page[got - 1].shard + 1;
    }
    free(page);
    if (x->json)
        printf("],\"stale\":%zu,\"deleted\":%zu}\n", stale, deleted);
    else
        printf("%zu stale member record(s)%s; %zu shard record(s) of dead primaries\n", stale,
               x->apply ? "" : " (dry run)", dead);
    if (!x->json && x->apply)
        printf("%zu deleted\n", deleted);
    free(m.v);
    return ret;
}

int cmd_admin(int argc, char **argv)
{
    struct adm x;
    memset(&x, 0, sizeof(x));
    x.page = ADM_PAGE_DEFAULT;
    x.max = ADM_MAX_DEFAULT;
    x.wait_ms = UINT64_MAX; /* not given */
    cli_opt_t opts[ADM_MAX_OPTS] = {
        {"json", NULL, CLI_FLAG, &x.json, "print one JSON document instead of a table"},
        {"apply", NULL, CLI_FLAG, &x.apply,
         "cleanup, quota abort|reconcile, policy set: act (without it, a dry run that changes "
         "nothing)"},
        {"op", "ID", CLI_STR, &x.op,
         "quota abort: abort this pending operation (even before its deadline) instead of "
         "the expired ones"},
        {"page", "N", CLI_U64, &x.page, "records per metadata read, 1..256 (default 100)"},
        {"max", "N", CLI_U64, &x.max,
         "read at most N records of each kind, 1..1000000 (default 10000)"},
        {"wait-ms", "N", CLI_U64, &x.wait_ms,
         "drain/activate (member or segment): wait up to N ms for the member to apply it, "
         "0..600000 (default "
         "15000; 0 = do not wait)"},
    };
    size_t nopts = cli_common_opts(&x.c, opts, 6, ADM_MAX_OPTS);
    const char *pos[CLI_MAX_POS];
    size_t npos = 0;
    static const char syn[] =
        "members | segments [list] | segments drain|activate MEMBER SEGMENT | shards | "
        "cleanup [--apply] | drain MEMBER | "
        "activate MEMBER | tenants [TENANT] | policy list | policy get TENANT | "
        "policy set TENANT FIELD=VALUE... [--apply] | "
        "devices [DEVICE] | devices drain|retire DEVICE | quota TENANT "
        "[abort|reconcile [--apply]] | quota TENANT object KEY [--domain D] [options]";
    static const char desc[] =
        "Reads the deployment's metadata directly (no runtime joins), in bounded pages:\n"
        "members   member records: id, epoch, state, weight, capacity, used, segments, rpc (and "
        "the\n"
        "          unix socket and host identity of rpc_local = unix)\n"
        "segments  [list]: the memory segments of every member record, each active or drained\n"
        "          drain MEMBER SEGMENT (ids, or unique prefixes): that segment takes no new\n"
        "          placements (they go to the member's other segments or other owners); its\n"
        "          objects stay readable where they are. Written into the member's lifecycle\n"
        "          request like drain, applied at its next heartbeat (a hot upgrade keeps\n"
        "          segment ids, a restart makes new ones); waits up to --wait-ms for its\n"
        "          record to say drained.\n"
        "          activate MEMBER SEGMENT: the segment takes placements again (the full id\n"
        "          of a segment the member no longer has removes a request left for it).\n"
        "shards    shard-authority records: state, generation, fencing token, primary (and\n"
        "          whether it is a live member), authority set\n"
        "cleanup   stale records of dead owners: member records that are malformed, not bound\n"
        "          to a lease, bound to an expired lease, or in state gone; a dry run lists\n"
        "          them, --apply deletes each one unless it changed since it was read. Shard\n"
        "          records of dead primaries are listed, never deleted (the fencing token must\n"
        "          stay monotonic; the route service takes them over).\n"
        "drain     MEMBER (its id, or a unique prefix): the member takes no new placements and\n"
        "          no route authority; its objects stay readable. Written as a lifecycle\n"
        "          request in metadata that the member applies at its next heartbeat and keeps\n"
        "          across restarts; waits up to --wait-ms for its record to say draining.\n"
        "activate  MEMBER: removes the drain request; the member takes placements again.\n"
        "tenants   tenant-root policies (policy version, limits, fingerprint) with each\n"
        "          tenant's usage; with TENANT only that one (exact reads)\n"
        "policy    list: the tenant-root policy records alone (schema, policy version, limits,\n"
        "          fingerprint); get TENANT: one of them (exact read).\n"
        "          set TENANT max_bytes=SIZE max_objects=N: the controlled restart of a hard\n"
        "          policy: a dry run shows the stored record, the new one (policy_version + 1,\n"
        "          its fingerprint), what changes and the live runtimes; --apply writes it,\n"
        "          refused while any runtime of the deployment is live (stop them all, set,\n"
        "          restart them with the printed tenant_policies entry).\n"
        "devices   cold device records (docs/cold.md): id, owner, kind, lifecycle, health,\n"
        "          schedulable, capacity / used / reserved bytes, root; with DEVICE only that one\n"
        "          drain DEVICE: no new cold copies placed there (unschedulable, draining); its\n"
        "          copies stay readable. retire DEVICE: only once it holds no used or reserved\n"
        "          bytes (refused, naming them, otherwise)\n"
        "quota     TENANT: its usage and its reservations (non-terminal quota operations from\n"
        "          the due index, deadline order, with the reconciliation backlog).\n"
        "          quota TENANT abort: pending reservations past their deadline (or --op ID);\n"
        "          a dry run lists them, --apply aborts each through the quota protocol.\n"
        "          quota TENANT reconcile: the due entries one reconciliation pass resolves;\n"
        "          --apply joins as a client runtime with the tenant's stored policy and runs\n"
        "          that pass (give the deployment's --config so the cluster policy matches).\n"
        "          quota TENANT object KEY [--domain D]: that object's committed accounting\n"
        "          row (one exact read): live, length, accounting version, route version, last\n"
        "          finalized operation and the quota operation holding it (lock), if any.\n"
        "Needs a shared metadata backend (redis:// or etcd://).";
    int rc = cli_parse("admin", opts, nopts, argc, argv, pos, CLI_MAX_POS, &npos);
    if (rc)
        return rc;
    if (x.c.help) {
        cli_usage(stdout, "admin", syn, desc, opts, nopts);
        return CLI_EXIT_OK;
    }
    static const struct {
        const char *name;
        size_t min, max; /* positionals after the subcommand */
        const char *usage;
    } subs[] = {
        {"members", 0, 0, ""},
        {"segments", 0, 3, " [list] | drain|activate MEMBER SEGMENT"},
        {"shards", 0, 0, ""},
        {"cleanup", 0, 0, " [--apply]"},
        {"drain", 1, 1, " MEMBER"},
        {"activate", 1, 1, " MEMBER"},
        {"tenants", 0, 1, " [TENANT]"},
        {"devices", 0, 2, " [DEVICE] | drain|retire DEVICE"},
        {"policy", 1, CLI_MAX_POS - 1, " list | get TENANT | set TENANT FIELD=VALUE..."},
        {"quota", 1, 3, " TENANT [abort|reconcile] [--apply] [--op ID] | TENANT object KEY"},
    };
    size_t nsubs = sizeof(subs) / sizeof(subs[0]), si = nsubs;
    if (npos >= 1)
        for (si = 0; si < nsubs; si++)
            if (strcmp(pos[0], subs[si].name) == 0)
                break;
    if (npos == 0) {
        fprintf(stderr, "kvmesh admin: expected one of members, segments, shards, cleanup, drain, "
                        "activate, tenants, policy, devices, quota; see kvmesh admin --help\n");
        return CLI_EXIT_USAGE;
    }
    x.sub = pos[0];
    if (si == nsubs) {
        fprintf(stderr,
                "kvmesh admin: unknown subcommand \"%s\"; expected members, segments, shards, "
                "cleanup, drain, activate, tenants, policy, devices or quota\n",
                x.sub);
        return CLI_EXIT_USAGE;
    }
    if (npos - 1 < subs[si].min || npos - 1 > subs[si].max) {
        fprintf(stderr, "kvmesh admin %s: expected %s; usage: kvmesh admin %s%s\n", x.sub,
                subs[si].max == 0                        ? "no more arguments"
                : subs[si].min == 1 && subs[si].max == 1 ? "one member id"
                : strcmp(x.sub, "devices") == 0          ? "at most one device id"
                : strcmp(x.sub, "segments") == 0 ? "\"list\" or \"drain|activate MEMBER SEGMENT\""
                : strcmp(x.sub, "policy") == 0
                    ? "\"list\", \"get TENANT\" or \"set TENANT FIELD=VALUE...\""
                : subs[si].min == 0 ? "at most one tenant"
                                    : "a tenant and at most one action (or object KEY)",
                x.sub, subs[si].usage);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(x.sub, "segments") == 0 &&
        !(npos == 1 || (npos == 2 && strcmp(pos[1], "list") == 0) ||
          (npos == 4 && (strcmp(pos[1], "drain") == 0 || strcmp(pos[1], "activate") == 0)))) {
        fprintf(stderr, "kvmesh admin segments: expected \"list\" or \"drain|activate MEMBER "
                        "SEGMENT\"; usage: kvmesh admin segments [list] | drain|activate MEMBER "
                        "SEGMENT\n");
        return CLI_EXIT_USAGE;
    }
    if (strcmp(x.sub, "segments") == 0 && npos == 4)
        x.op_seg = pos[1];
    bool policy_set = strcmp(x.sub, "policy") == 0 && npos >= 3 && strcmp(pos[1], "set") == 0;
    if (strcmp(x.sub, "policy") == 0 &&
        !((npos == 2 && strcmp(pos[1], "list") == 0) || (npos == 3 && strcmp(pos[1], "get") == 0) ||
          policy_set)) {
        fprintf(stderr, "kvmesh admin policy: expected \"list\", \"get TENANT\" or \"set TENANT "
                        "FIELD=VALUE...\"; usage: kvmesh admin policy list | get TENANT | set "
                        "TENANT max_bytes=SIZE max_objects=N [--apply]\n");
        return CLI_EXIT_USAGE;
    }
    bool quota = strcmp(x.sub, "quota") == 0;
    bool object = quota && npos >= 3 && strcmp(pos[2], "object") == 0;
    if (quota && (npos == 4 || object) && !(object && npos == 4)) {
        fprintf(stderr, "kvmesh admin quota: expected \"TENANT object KEY\" (the object's key "
                        "after \"object\"); usage: kvmesh admin quota TENANT object KEY "
                        "[--domain D]\n");
        return CLI_EXIT_USAGE;
    }
    if (x.c.domain && !object) {
        fprintf(stderr, "kvmesh admin %s: --domain belongs to quota TENANT object KEY\n", x.sub);
        return CLI_EXIT_USAGE;
    }
    const char *action = quota && npos == 3 ? pos[2] : NULL;
    if (action && strcmp(action, "abort") != 0 && strcmp(action, "reconcile") != 0) {
        fprintf(stderr,
                "kvmesh admin quota: unknown action \"%s\"; expected abort, reconcile or "
                "object KEY (or none to show usage and reservations)\n",
                action);
        return CLI_EXIT_USAGE;
    }
    bool applies = strcmp(x.sub, "cleanup") == 0 || action != NULL || policy_set;
    if (x.apply && !applies) {
        fprintf(stderr,
                "kvmesh admin %s: --apply belongs to cleanup, quota abort|reconcile and policy "
                "set\n",
                x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.op && !(action && strcmp(action, "abort") == 0)) {
        fprintf(stderr, "kvmesh admin %s: --op belongs to quota TENANT abort\n", x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.op && strlen(x.op) != KVMESH_ADMIN_OPID_LEN) {
        fprintf(stderr,
                "kvmesh admin quota: --op \"%s\" is not an operation id (%d characters: "
                "<epoch 16 hex>-<seq 16 hex>; see kvmesh admin quota TENANT)\n",
                x.op, KVMESH_ADMIN_OPID_LEN);
        return CLI_EXIT_USAGE;
    }
    if (x.wait_ms != UINT64_MAX && strcmp(x.sub, "drain") != 0 && strcmp(x.sub, "activate") != 0 &&
        !x.op_seg) {
        fprintf(stderr,
                "kvmesh admin %s: --wait-ms belongs to drain, activate and segments "
                "drain|activate\n",
                x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.wait_ms == UINT64_MAX)
        x.wait_ms = ADM_WAIT_DEFAULT_MS;
    if (x.wait_ms > ADM_WAIT_MAX_MS) {
        fprintf(stderr, "kvmesh admin: --wait-ms %" PRIu64 " is out of range; allowed 0..%d\n",
                x.wait_ms, ADM_WAIT_MAX_MS);
        return CLI_EXIT_USAGE;
    }
    if (x.page < 1 || x.page > KVMESH_ADMIN_PAGE_MAX) {
        fprintf(stderr, "kvmesh admin: --page %" PRIu64 " is out of range; allowed 1..%d\n", x.page,
                KVMESH_ADMIN_PAGE_MAX);
        return CLI_EXIT_USAGE;
    }
    if (x.max < 1 || x.max > ADM_MAX_LIMIT) {
        fprintf(stderr, "kvmesh admin: --max %" PRIu64 " is out of range; allowed 1..%d\n", x.max,
                ADM_MAX_LIMIT);
        return CLI_EXIT_USAGE;
    }
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg)
        return CLI_EXIT_FAIL;
    rc = cli_build_config(&x.c, cfg, "admin");
    if (rc) {
        kvmesh_config_free(cfg);
        return rc;
    }
    const char *url = kvmesh_tools_config_str(cfg, "metadata_url");
    if (strncmp(url, "memory://", 9) == 0) {
        fprintf(stderr,
                "kvmesh admin: metadata %s is private to the process that holds it; give "
                "--metadata redis://HOST:PORT or etcd://HOST:PORT of the deployment\n",
                url);
        kvmesh_config_free(cfg);
        return CLI_EXIT_USAGE;
    }
    x.cfg = cfg;
    int e = kvmesh_admin_open(cfg, &x.a);
    if (e) {
        fprintf(stderr, "kvmesh admin: cannot open metadata %s: %s: %s\n", url, kvmesh_strerror(e),
                kvmesh_last_error());
        kvmesh_config_free(cfg);
        return CLI_EXIT_FAIL;
    }
    bool dev_action = strcmp(x.sub, "devices") == 0 && npos == 3 &&
                      (strcmp(pos[1], "drain") == 0 || strcmp(pos[1], "retire") == 0);
    if (strcmp(x.sub, "devices") == 0 && npos == 3 && !dev_action) {
        fprintf(stderr, "kvmesh admin devices: expected at most one device id, or drain|retire "
                        "DEVICE; usage: kvmesh admin devices [DEVICE] | drain|retire DEVICE\n");
        kvmesh_admin_close(x.a);
        kvmesh_config_free(cfg);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(x.sub, "devices") == 0 && npos == 2 &&
        (strcmp(pos[1], "drain") == 0 || strcmp(pos[1], "retire") == 0)) {
        fprintf(stderr,
                "kvmesh admin devices %s: expected a device id; usage: kvmesh admin "
                "devices %s DEVICE\n",
                pos[1], pos[1]);
        kvmesh_admin_close(x.a);
        kvmesh_config_free(cfg);
        return CLI_EXIT_USAGE;
    }
    if (dev_action)
        rc = admin_device_action(x.a, cfg, pos[1], pos[2], x.json);
    else if (strcmp(x.sub, "members") == 0)
        rc = do_members(&x, false);
    else if (strcmp(x.sub, "segments") == 0 && x.op_seg)
        rc = do_segment_lifecycle(&x, pos[2], pos[3]);
    else if (strcmp(x.sub, "segments") == 0)
        rc = do_members(&x, true);
    else if (strcmp(x.sub, "shards") == 0)
        rc = do_shards(&x);
    else if (strcmp(x.sub, "drain") == 0 || strcmp(x.sub, "activate") == 0)
        rc = do_lifecycle(&x, pos[1]);
    else if (strcmp(x.sub, "tenants") == 0)
        rc = do_tenants(&x, npos == 2 ? pos[1] : NULL, false);
    else if (policy_set)
        rc = admin_policy_set(x.a, cfg, pos[2], pos + 3, npos - 3, x.apply, x.json);
    else if (strcmp(x.sub, "policy") == 0)
        rc = do_tenants(&x, npos == 3 ? pos[2] : NULL, true);
    else if (strcmp(x.sub, "devices") == 0)
        rc = do_devices(&x, npos == 2 ? pos[1] : NULL);
    else if (object)
        rc = admin_quota_object(x.a, cfg, pos[1], x.c.domain, pos[3], x.json);
    else if (quota)
        rc = do_quota(&x, pos[1], action);
    else
        rc = do_cleanup(&x);
    kvmesh_admin_close(x.a);
    kvmesh_config_free(cfg);
    return rc;
}
