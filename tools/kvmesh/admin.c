/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin.c — `kvmesh admin`: the operator's view of a deployment's metadata, read directly
 * (no runtime joins) in bounded pages through api/kvmesh_tools.h:
 *   members    member records: id, epoch, state, weight, capacity, used, heartbeat, addresses
 *   segments   the memory segments each member record lists
 *   shards     shard-authority records: generation, fencing token, state, primary, set, and
 *              whether the primary is a live member
 *   cleanup    stale records of dead owners: a dry run lists them; --apply deletes the stale
 *              member records (each only if unchanged since it was read). Shard records of dead
 *              primaries are listed but never deleted: they carry the monotonic fencing token
 *              and the state-transfer source, and the route service takes them over.
 * Every listing has --json (one JSON document on stdout) or a table. Reads are pages of
 * --page records, at most --max records in all (the listing says when it stopped early).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
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
    const kvmesh_config_t *cfg;
    const char *sub;
};

static void json_str(const char *s)
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
        bool found = false;
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
        json_str(m.id);
        printf(",\"request\":\"%s\",\"state\":", want);
        json_str(gone ? "gone" : m.state);
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

/* ---- subcommands --------------------------------------------------------------------------- */

static int do_members(struct adm *x, bool segments)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    if (x->json) {
        printf("{\"members\":[");
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            printf("%s{\"id\":", i ? "," : "");
            json_str(e->id);
            if (e->malformed) {
                printf(",\"malformed\":true}");
                continue;
            }
            printf(",\"epoch\":%" PRIu64 ",\"state\":", e->epoch);
            json_str(e->state);
            printf(",\"weight\":%g,\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                   ",\"heartbeat\":%" PRIu64 ",\"rpc\":",
                   e->weight, e->capacity_bytes, e->used_bytes, e->heartbeat);
            json_str(e->rpc);
            printf(",\"data\":");
            json_str(e->data);
            printf(",\"lease\":%" PRId64 ",\"segments\":[", e->lease);
            for (uint32_t k = 0; k < e->n_segments; k++)
                printf("%s{\"id\":\"%016" PRIx64 "\",\"size_bytes\":%" PRIu64 "}", k ? "," : "",
                       e->segments[k].id, e->segments[k].size);
            printf("]}");
        }
        printf("],\"count\":%zu,\"truncated\":%s}\n", m.n, m.truncated ? "true" : "false");
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
            printf("%-32s %6" PRIu64 " %-9s %7.3g %12s %12s %9u  %s\n", e->id, e->epoch, e->state,
                   e->weight, cap, used, e->n_segments, e->rpc);
        }
        printf("%zu member record(s)%s\n", m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
    } else {
        printf("%-32s %-9s %-16s %12s\n", "member", "state", "segment", "size");
        size_t total = 0;
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            for (uint32_t k = 0; !e->malformed && k < e->n_segments; k++) {
                char sz[32];
                kvmesh_tools_format_size(e->segments[k].size, sz, sizeof(sz));
                printf("%-32s %-9s %016" PRIx64 " %12s\n", e->id, e->state, e->segments[k].id, sz);
                total++;
            }
        }
        printf("%zu segment(s) of %zu member record(s)%s\n", total, m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
    }
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
            json_str(e->id);
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
         "cleanup: delete the stale records (without it, cleanup is a dry run)"},
        {"page", "N", CLI_U64, &x.page, "records per metadata read, 1..256 (default 100)"},
        {"max", "N", CLI_U64, &x.max,
         "read at most N records of each kind, 1..1000000 (default 10000)"},
        {"wait-ms", "N", CLI_U64, &x.wait_ms,
         "drain/activate: wait up to N ms for the member to apply it, 0..600000 (default "
         "15000; 0 = do not wait)"},
    };
    size_t nopts = cli_common_opts(&x.c, opts, 5, ADM_MAX_OPTS);
    const char *pos[CLI_MAX_POS];
    size_t npos = 0;
    static const char syn[] = "members | segments | shards | cleanup [--apply] | drain MEMBER | "
                              "activate MEMBER [options]";
    static const char desc[] =
        "Reads the deployment's metadata directly (no runtime joins), in bounded pages:\n"
        "members   member records: id, epoch, state, weight, capacity, used, segments, rpc\n"
        "segments  the memory segments of every member record\n"
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
        size_t args; /* positionals after the subcommand */
        const char *usage;
    } subs[] = {
        {"members", 0, ""}, {"segments", 0, ""},     {"shards", 0, ""},
        {"cleanup", 0, ""}, {"drain", 1, " MEMBER"}, {"activate", 1, " MEMBER"},
    };
    size_t si = sizeof(subs) / sizeof(subs[0]);
    if (npos >= 1)
        for (si = 0; si < sizeof(subs) / sizeof(subs[0]); si++)
            if (strcmp(pos[0], subs[si].name) == 0)
                break;
    if (npos == 0) {
        fprintf(stderr, "kvmesh admin: expected one of members, segments, shards, cleanup, drain, "
                        "activate; see kvmesh admin --help\n");
        return CLI_EXIT_USAGE;
    }
    x.sub = pos[0];
    if (si == sizeof(subs) / sizeof(subs[0])) {
        fprintf(stderr,
                "kvmesh admin: unknown subcommand \"%s\"; expected members, segments, shards, "
                "cleanup, drain or activate\n",
                x.sub);
        return CLI_EXIT_USAGE;
    }
    if (npos - 1 != subs[si].args) {
        fprintf(stderr, "kvmesh admin %s: expected %s; usage: kvmesh admin %s%s\n", x.sub,
                subs[si].args ? "one member id" : "no more arguments", x.sub, subs[si].usage);
        return CLI_EXIT_USAGE;
    }
    if (x.apply && strcmp(x.sub, "cleanup") != 0) {
        fprintf(stderr, "kvmesh admin %s: --apply belongs to cleanup\n", x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.wait_ms != UINT64_MAX && subs[si].args == 0) {
        fprintf(stderr, "kvmesh admin %s: --wait-ms belongs to drain and activate\n", x.sub);
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
    if (strcmp(x.sub, "members") == 0)
        rc = do_members(&x, false);
    else if (strcmp(x.sub, "segments") == 0)
        rc = do_members(&x, true);
    else if (strcmp(x.sub, "shards") == 0)
        rc = do_shards(&x);
    else if (strcmp(x.sub, "drain") == 0 || strcmp(x.sub, "activate") == 0)
        rc = do_lifecycle(&x, pos[1]);
    else
        rc = do_cleanup(&x);
    kvmesh_admin_close(x.a);
    kvmesh_config_free(cfg);
    return rc;
}
