/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport.c (bench_transport) — data-plane transport throughput.
 *
 * Measures, in one run on this machine: memcpy bandwidth (64 MiB buffers), a plain loopback TCP
 * stream (one sender thread, one receiver thread, 1 MiB send/recv calls), and kvmesh's tcp and
 * shm transports for READ and WRITE at 64 KiB, 1 MiB, 4 MiB and 64 MiB, with single submission
 * (one request per batch, waited) and batched submission (up to 64 requests per batch). The
 * owner and the client are two engines in this process with separate registries (the tcp
 * transport goes through real loopback sockets; the shm one maps the owner's memfd a second
 * time). Ratios: tcp against the loopback stream, shm against memcpy. Every cell checks payload
 * integrity (XXH3) of its last transfer.
 *
 * Usage: bench_transport [--quick] [--secs S] [--xprt tcp|shm] [--sum] [--copy NAME]
 *                        [--kernels | --kernels-cpu]
 *   --quick  one transfer per cell, sizes up to 4 MiB, integrity only (the ctest smoke run; it
 *            folds checksums too, as --sum, and checks them)
 *   --secs   seconds per cell (default 0.3)
 *   --xprt   only this transport (tcp or shm), e.g. for perf record
 *   --sum    every batch's requests fold one checksum (tp_request.sum) where the transport does
 *            (tp_segment_sums), as a store put or get does; the last one is checked
 *   --copy   the streaming-copy variant (core/copy.h: memcpy, sse2, avx512) for before/after
 *            runs of the shm write path in one binary
 *   --kernels only the shm data stage's copy + checksum kernels, old and new alternated in one
 *            process (kernels_main below): no transport, no engine
 *   --kernels-cpu  the same, timed in the thread's CPU time (on a loaded machine: preemption
 *            left out; the kernels are memory-bound, so CPU time is their stall time)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "core/copy.h"
#include "core/hash.h"
#include "core/util.h"
#include "env/clock.h"
#include "net/seg.h"
#include "net/transport.h"

#define MiB             (1ull << 20)
#define SEG_SZ          (128 * MiB)
#define MAX_K           64
#define QUICK_FOOTPRINT (8 * MiB) /* --quick: bytes per batch at most */

static double now_s(void)
{
    return (double)env_clock_mono_ns() / 1e9;
}

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

/* memcpy of an n-byte buffer into another, repeated (same footprint as a transfer cell). */
/* peer buffers, SEG_SZ each, allocated and faulted in once (peer_init) */
static uint8_t *peer_a, *peer_b;

static void peer_init(void)
{
    peer_a = malloc(SEG_SZ);
    peer_b = malloc(SEG_SZ);
    KVM_ASSERT(peer_a && peer_b);
    memset(peer_a, 1, SEG_SZ);
    memset(peer_b, 2, SEG_SZ);
}

static double bench_memcpy(uint64_t n, double secs)
{
    uint8_t *a = peer_a, *b = peer_b;
    uint64_t bytes = 0;
    double t0 = now_s(), t;
    do {
        memcpy(b, a, n);
        bytes += n;
        t = now_s();
    } while (t - t0 < secs);
    return (double)bytes / (t - t0) / 1e9;
}

struct stream_arg {
    int fd;
    uint64_t bufsz;
    int stop; /* atomic */
};

static void *stream_sender(void *arg)
{
    struct stream_arg *s = arg;
    uint8_t *buf = peer_a;
    uint64_t pos = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        ssize_t n = send(s->fd, buf + pos, s->bufsz - pos, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        pos = (pos + (uint64_t)n) % s->bufsz;
    }
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

/* A plain loopback TCP sender/receiver pair: the sender streams an n-byte buffer, the receiver
 * receives into an n-byte buffer (the same footprint as a transfer cell), for `secs`. */
static double bench_loopback(uint64_t n, double secs)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    KVM_ASSERT(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 1) == 0);
    getsockname(l, (struct sockaddr *)&sa, &sl);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    KVM_ASSERT(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    int r = accept(l, NULL, NULL);
    KVM_ASSERT(r >= 0);
    uint8_t *buf = peer_b;
    struct stream_arg a = {.fd = c, .bufsz = n};
    pthread_t th;
    pthread_create(&th, NULL, stream_sender, &a);
    /* warm up: one buffer's worth (at most 16 MiB) before the clock starts */
    uint64_t got = 0, pos = 0, warm = KVM_MIN(n, 16 * MiB);
    while (got < warm) {
        ssize_t m = recv(r, buf + pos, n - pos, 0);
        KVM_ASSERT(m > 0);
        got += (uint64_t)m;
        pos = (pos + (uint64_t)m) % n;
    }
    got = 0;
    double t0 = now_s(), t = t0;
    while (t - t0 < secs) {
        ssize_t m = recv(r, buf + pos, n - pos, 0);
        KVM_ASSERT(m > 0);
        got += (uint64_t)m;
        pos = (pos + (uint64_t)m) % n;
        t = now_s();
    }
    __atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
    while (recv(r, buf, n, 0) > 0) /* drain until the sender's shutdown */
        ;
    pthread_join(th, NULL);
    close(c);
    close(r);
    close(l);
    return (double)got / (t - t0) / 1e9;
}

struct ctx {
    struct seg_registry *oreg, *creg;
    struct tp_engine *owner, *client;
    struct seg *seg;
    struct seg_grant g;
    struct tp_segment *rs;
    uint8_t *local;
};

/* The checksum folded by the last batch of a cell against the bytes it moved (sum: NULL when
 * the cell folds none). */
static int check_sum(const struct ctx *c, const struct kvm_sum *sum, uint64_t len)
{
    if (!sum || kvm_sum_digest(sum) == XXH3_64bits(c->local, len))
        return 0;
    fprintf(stderr, "folded checksum differs from the bytes moved (%llu bytes)\n",
            (unsigned long long)len);
    return -1;
}

static int cell(struct ctx *c, enum tp_op op, uint64_t size, unsigned k, double secs, bool quick,
                bool want_sum, double *gbps)
{
    struct tp_request r[MAX_K];
    struct kvm_sum st, *sum = want_sum && tp_segment_sums(c->rs, k) ? &st : NULL;
    for (unsigned i = 0; i < k; i++)
        r[i] = (struct tp_request){.op = op,
                                   .local = c->local + i * size,
                                   .length = size,
                                   .segment = c->rs,
                                   .remote_offset = i * size,
                                   .token = c->g.token,
                                   .sum = sum};
    if (op == TP_WRITE)
        fill(c->local, size * k, size + k);
    uint64_t bytes = 0;
    double t0 = now_s(), t;
    do {
        struct tp_batch *b;
        if (sum)
            kvm_sum_init(sum, KVM_HASH_SEED_CHECKSUM);
        if (tp_batch_new(c->client, k, &b) || tp_submit(b, r, k) || tp_batch_wait(b, 60000))
            return -1;
        int rc = tp_batch_result(b);
        tp_batch_free(b);
        if (rc) {
            fprintf(stderr, "transfer failed: %s\n", kvmesh_strerror(rc));
            return -1;
        }
        bytes += size * k;
        t = now_s();
    } while (!quick && t - t0 < secs);
    *gbps = (double)bytes / (t - t0) / 1e9;
    /* integrity of the last transfer */
    if (XXH3_64bits(c->local, size * k) != XXH3_64bits(c->seg->base, size * k)) {
        fprintf(stderr, "integrity check failed (%s %llu x %u)\n", op == TP_READ ? "READ" : "WRITE",
                (unsigned long long)size, k);
        return -1;
    }
    return check_sum(c, sum, size * k);
}

/* ---- --kernels: the copy + checksum of a store get's and put's data stage ----------------------
 *
 * The owner's pages: a memfd of KERN_SET bytes mapped MAP_SHARED and faulted in (as a client maps
 * an owner's segment), one value per slot, each call on the next slot (a store bench's working
 * set: 128 MiB, so the slot is not in this core's cache). A read copies a slot into one caller
 * buffer (a get's registered destination, 16 bytes past a page like malloc's); a write copies
 * one of 4 caller buffers into a slot. Every kernel also folds the XXH3 checksum (seed 0), as a
 * get with verify_reads or any put does. "memcpy hot" is the store bench's memcpy line: the same
 * two buffers every time. Kernels are alternated call-batch by call-batch; best and median of
 * KERN_REPS batches, in us per call. docs/performance.md "Large shm gets: the copy and the
 * checksum". */
#define KERN_SET  (128 * MiB)
#define KERN_REPS 41

struct kern {
    const char *name;
    void (*fn)(uint8_t *slot, size_t n);
};

static uint8_t *kern_dst, *kern_src[4], *kern_hot_a, *kern_hot_b;
static unsigned kern_next;
static volatile uint64_t kern_sink;

static void k_hot(uint8_t *slot, size_t n)
{
    (void)slot;
    memcpy(kern_hot_b, kern_hot_a, n);
    kern_sink = kern_hot_b[n - 1];
}

static void k_read_copy(uint8_t *slot, size_t n)
{
    memcpy(kern_dst, slot, n);
    kern_sink = kern_dst[n - 1];
}

static void k_read_blocks(uint8_t *slot, size_t n) /* before: 256 KiB memcpy, then its hash */
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    for (size_t o = 0, k; o < n; o += k) {
        k = KVM_MIN((size_t)256 << 10, n - o);
        memcpy(kern_dst + o, slot + o, k);
        kvm_sum_update(&st, kern_dst + o, k);
    }
    kern_sink = kvm_sum_digest(&st);
}

static void k_read_fused(uint8_t *slot, size_t n) /* after: one pass */
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    kvm_sum_update_copy(&st, kern_dst, slot, n);
    kern_sink = kvm_sum_digest(&st);
}

static void k_read_fused_nt(uint8_t *slot, size_t n) /* one pass, streaming stores (>= 4 MiB) */
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    kvm_sum_update_copy_stream(&st, kern_dst, slot, n);
    kvm_copy_stream_fence();
    kern_sink = kvm_sum_digest(&st);
}

static void k_write_blocks(uint8_t *slot, size_t n) /* before (>= 1 MiB): 16 KiB stream, hash */
{
    const uint8_t *src = kern_src[kern_next++ % 4];
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    for (size_t o = 0, k; o < n; o += k) {
        k = KVM_MIN((size_t)16 << 10, n - o);
        kvm_copy_stream(slot + o, src + o, k);
        kvm_sum_update(&st, src + o, k);
    }
    kvm_copy_stream_fence();
    kern_sink = kvm_sum_digest(&st);
}

static void k_write_plain(uint8_t *slot, size_t n) /* plain stores, one pass (< 256 KiB now) */
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    kvm_sum_update_copy(&st, slot, kern_src[kern_next++ % 4], n);
    kern_sink = kvm_sum_digest(&st);
}

static void k_write_memcpy(uint8_t *slot, size_t n) /* before (< 1 MiB): 256 KiB memcpy, hash */
{
    const uint8_t *src = kern_src[kern_next++ % 4];
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    for (size_t o = 0, k; o < n; o += k) {
        k = KVM_MIN((size_t)256 << 10, n - o);
        memcpy(slot + o, src + o, k);
        kvm_sum_update(&st, src + o, k);
    }
    kern_sink = kvm_sum_digest(&st);
}

static void k_write_fused(uint8_t *slot, size_t n) /* after (>= 256 KiB): streamed, one pass */
{
    struct kvm_sum st;
    kvm_sum_init(&st, KVM_HASH_SEED_CHECKSUM);
    kvm_sum_update_copy_stream(&st, slot, kern_src[kern_next++ % 4], n);
    kvm_copy_stream_fence();
    kern_sink = kvm_sum_digest(&st);
}

static bool kern_cpu; /* --kernels-cpu */

static uint64_t kern_now(void)
{
    if (!kern_cpu)
        return env_clock_mono_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int kernels_main(void)
{
    static const struct kern ks[] = {
        {"memcpy hot (the bench's memcpy line)", k_hot},
        {"read: memcpy only (no checksum)", k_read_copy},
        {"read: 256 KiB memcpy + hash (before)", k_read_blocks},
        {"read: fused copy + hash (plain stores)", k_read_fused},
        {"read: fused, streaming stores into dst", k_read_fused_nt},
        {"write: 256 KiB memcpy + hash (before, < 1 MiB)", k_write_memcpy},
        {"write: 16 KiB stream + hash (before, >= 1 MiB)", k_write_blocks},
        {"write: fused, plain stores", k_write_plain},
        {"write: fused, streaming stores (after, >= 256 KiB)", k_write_fused},
    };
    static const uint64_t sizes[] = {256 << 10, 1 * MiB, 4 * MiB, 16 * MiB};
    int fd = memfd_create("bench-kernels", MFD_CLOEXEC);
    KVM_ASSERT(fd >= 0 && ftruncate(fd, (off_t)KERN_SET) == 0);
    uint8_t *set = mmap(NULL, KERN_SET, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    KVM_ASSERT(set != MAP_FAILED);
    fill(set, KERN_SET, 7);
    uint8_t *dbuf = malloc(16 * MiB + 4096), *hot = malloc(32 * MiB);
    KVM_ASSERT(dbuf && hot);
    kern_dst = dbuf + 16;
    kern_hot_a = hot;
    kern_hot_b = hot + 16 * MiB;
    memset(dbuf, 0, 16 * MiB + 4096);
    memset(hot, 3, 32 * MiB);
    for (int i = 0; i < 4; i++) {
        kern_src[i] = malloc(16 * MiB);
        KVM_ASSERT(kern_src[i]);
        fill(kern_src[i], 16 * MiB, 11 + (uint64_t)i);
    }
    printf("copy + XXH3 kernels of the shm data stage (XXH3 %s, copy %s); %s us per call over a "
           "%llu MiB memfd working set, best / median of %d alternated batches\n",
           kvm_hash_impl(), kvm_copy_impl(), kern_cpu ? "thread CPU" : "wall",
           (unsigned long long)(KERN_SET / MiB), KERN_REPS);
    for (size_t si = 0; si < KVM_ARRAY_SIZE(sizes); si++) {
        size_t n = sizes[si], slots = KERN_SET / n, slot = 0;
        unsigned calls = n >= 16 * MiB ? 4 : n >= MiB ? 16 : 64;
        uint64_t t[KVM_ARRAY_SIZE(ks)][KERN_REPS];
        for (int rep = 0; rep < KERN_REPS; rep++) {
            for (size_t k = 0; k < KVM_ARRAY_SIZE(ks); k++) {
                uint64_t t0 = kern_now();
                for (unsigned c = 0; c < calls; c++, slot = (slot + 1) % slots)
                    ks[k].fn(set + slot * n, n);
                t[k][rep] = (kern_now() - t0) / calls;
            }
        }
        printf("\n%8llu KiB\n", (unsigned long long)(n >> 10));
        for (size_t k = 0; k < KVM_ARRAY_SIZE(ks); k++) {
            qsort(t[k], KERN_REPS, sizeof(t[k][0]), cmp_u64);
            printf("  %-52s %9.1f / %9.1f us\n", ks[k].name, (double)t[k][0] / 1e3,
                   (double)t[k][KERN_REPS / 2] / 1e3);
        }
        fflush(stdout);
    }
    for (int i = 0; i < 4; i++)
        free(kern_src[i]);
    free(dbuf);
    free(hot);
    munmap(set, KERN_SET);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    bool quick = false, want_sum = false;
    double secs = 0.3;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--xprt") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--secs") == 0 && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (strcmp(argv[i], "--sum") == 0)
            want_sum = true;
        else if (strcmp(argv[i], "--kernels") == 0)
            return kernels_main();
        else if (strcmp(argv[i], "--kernels-cpu") == 0) {
            kern_cpu = true;
            return kernels_main();
        } else if (strcmp(argv[i], "--copy") == 0 && i + 1 < argc) {
            if (kvm_copy_impl_use(argv[++i]) != 0) {
                fprintf(stderr, "--copy: %s\n", kvmesh_last_error());
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--quick] [--secs S] [--xprt tcp|shm] [--sum] [--copy NAME] "
                    "[--kernels | --kernels-cpu]\n",
                    argv[0]);
            return 2;
        }
    }
    want_sum = want_sum || quick;
    if (!quick)
        printf("cores online: %ld; each cell: peer and transport alternated 3 times with the same "
               "footprint (bytes per batch), best of each; checksum folded: %s; copy: %s\n\n",
               sysconf(_SC_NPROCESSORS_ONLN), want_sum ? "yes" : "no", kvm_copy_impl());

    static const uint64_t sizes[] = {64 << 10, 1 * MiB, 4 * MiB, 64 * MiB};
    static const enum tp_kind kinds[] = {TP_TCP, TP_SHM};
    int fails = 0;
    printf("%-4s %-5s %-7s %-7s %4s %9s %9s %7s %-8s %s\n", "xprt", "op", "size", "submit", "k",
           "GB/s", "peer GB/s", "ratio", "peer", "target");
    if (!quick)
        peer_init();
    for (size_t ki = 0; ki < KVM_ARRAY_SIZE(kinds); ki++) {
        if (only && strcmp(only, tp_kind_name(kinds[ki])) != 0)
            continue;
        struct ctx c = {0};
        struct tp_config oc = {.kind = TP_AUTO};
        struct tp_config cc = {.kind = kinds[ki], .no_server = true};
        if (seg_registry_new(&c.oreg) || seg_registry_new(&c.creg) ||
            tp_engine_new(&oc, c.oreg, &c.owner) || tp_engine_new(&cc, c.creg, &c.client) ||
            seg_create(c.oreg, SEG_SZ, 0, &c.seg) ||
            seg_grant(c.oreg, c.seg->id, 0, c.seg->size, SEG_READ | SEG_WRITE, 0, &c.g) ||
            tp_open_segment(c.client, tp_engine_address(c.owner), c.seg->id, c.g.token, &c.rs)) {
            fprintf(stderr, "setup failed: %s\n", kvmesh_last_error());
            return 1;
        }
        c.local = malloc(SEG_SZ);
        KVM_ASSERT(c.local);
        tp_register_memory(c.client, c.local, SEG_SZ);
        uint64_t used = quick ? QUICK_FOOTPRINT : SEG_SZ;
        fill(c.seg->base, used, 99);
        memset(c.local, 0, used);
        for (size_t si = 0; si < KVM_ARRAY_SIZE(sizes); si++) {
            uint64_t size = sizes[si];
            if (quick && size > 4 * MiB)
                continue;
            for (int opi = 0; opi < 2; opi++) {
                enum tp_op op = opi ? TP_WRITE : TP_READ;
                for (int batched = 0; batched < 2; batched++) {
                    unsigned k = 1;
                    if (batched) {
                        k = (unsigned)KVM_MIN((uint64_t)MAX_K, KVM_MAX(2, 64 * MiB / size));
                        if (size * k > SEG_SZ)
                            k = (unsigned)(SEG_SZ / size);
                        if (quick && size * k > QUICK_FOOTPRINT)
                            k = (unsigned)KVM_MAX(2, QUICK_FOOTPRINT / size);
                    }
                    double g = 0;
                    if (cell(&c, op, size, k, secs, true, want_sum, &g)) { /* warm-up + integrity */
                        fails++;
                        continue;
                    }
                    double base = 1;
                    if (!quick) { /* alternate peer and transport, keep the best of each */
                        base = 0;
                        g = 0;
                        for (int rep = 0; rep < 3; rep++) {
                            double pg = kinds[ki] == TP_TCP ? bench_loopback(size * k, secs / 3)
                                                            : bench_memcpy(size * k, secs / 3);
                            double tg = 0;
                            if (cell(&c, op, size, k, secs / 3, quick, want_sum, &tg)) {
                                fails++;
                                break;
                            }
                            base = KVM_MAX(base, pg);
                            g = KVM_MAX(g, tg);
                        }
                    }
                    double ratio = g / base;
                    const char *target = "-";
                    if (size >= MiB)
                        target = kinds[ki] == TP_TCP
                                     ? (ratio >= 0.8 ? ">=80% met" : ">=80% MISSED")
                                     : (ratio >= 0.6 ? ">=60% met" : ">=60% MISSED");
                    char sz[16];
                    if (size >= MiB)
                        snprintf(sz, sizeof(sz), "%lluM", (unsigned long long)(size / MiB));
                    else
                        snprintf(sz, sizeof(sz), "%lluK", (unsigned long long)(size >> 10));
                    if (quick)
                        printf("%-4s %-5s %-7s %-7s %4u %9s %9s %7s %-8s %s\n",
                               tp_kind_name(kinds[ki]), op == TP_READ ? "READ" : "WRITE", sz,
                               batched ? "batch" : "single", k, "ok", "-", "-", "-", "integrity");
                    else
                        printf("%-4s %-5s %-7s %-7s %4u %9.2f %9.2f %6.0f%% %-8s %s\n",
                               tp_kind_name(kinds[ki]), op == TP_READ ? "READ" : "WRITE", sz,
                               batched ? "batch" : "single", k, g, base, ratio * 100,
                               kinds[ki] == TP_TCP ? "loopback" : "memcpy", target);
                    fflush(stdout);
                }
            }
        }
        tp_close_segment(c.rs);
        tp_engine_free(c.client);
        tp_engine_free(c.owner);
        seg_registry_free(c.creg);
        seg_registry_free(c.oreg);
        free(c.local);
    }
    free(peer_a);
    free(peer_b);
    if (fails)
        fprintf(stderr, "%d cells failed\n", fails);
    return fails ? 1 : 0;
}
