/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_uv_thread.c — a libuv loop with one env on a private thread, which an application thread
 * may also run itself while it waits for its own work (leader/follower; contract in env_uv.h).
 *
 * Who runs the loop: whichever thread holds run_mu. The loop thread takes it (trylock) for one
 * uv_run(UV_RUN_NOWAIT) pass at a time and sleeps outside it, in epoll_wait on park_fd, a set of
 * the loop's backend fd (while io_on) and kick_fd (libuv's embedding pattern: uv_backend_fd /
 * uv_backend_timeout). An application thread that finds run_mu free (trylock) leads: it turns
 * the backend fd off in park_fd if it is on (so the answer it waits for wakes it alone, not the
 * loop thread too), runs its callback directly, then the loop (UV_RUN_ONCE, blocking in the
 * loop's own epoll) until its condition holds, its deadline passes or the thread stops, and lets
 * go. All loop state (the uv loop, the env, whatever the callbacks touch) passes from one runner
 * to the next through run_mu, so each runner's writes happen before the next runner's reads.
 *
 * The loop's I/O after a lead (lead_io_after): a lead that began more than LEAD_IO_GRACE_MS after
 * the last one let go turns the backend fd on again as it lets go (an event it left pending
 * wakes the loop thread at once): one epoll_ctl pair per isolated lead. Leads in a row (an
 * application thread issuing one op after the other) leave it off: no epoll_ctl per lead. The
 * loop thread then sleeps at most LEAD_IO_GRACE_MS at a time (a leaving leader kicks it when it
 * sleeps longer), and its first pass after the leads stopped (none let go within the grace) turns
 * the backend fd on again before it sleeps. So I/O that arrives between two leads of a run, which
 * no leader waits for (a request from a peer), waits for the next lead or at most
 * LEAD_IO_GRACE_MS for the loop thread; posts kick the sleeping loop thread at once (post_kick),
 * and while a thread waits for the loop without leading it (env_uv_thread_waiting: a posted op)
 * leads give the I/O back as they let go and the loop thread keeps it.
 *
 * A loop nobody leads (sleep_in_loop): once no thread has tried to lead, nor let go of a lead, for
 * LEAD_RECENT_MS (a storage daemon's loop, a runtime whose application threads do not call in),
 * the loop thread sleeps inside the loop's own poll instead: uv_run(UV_RUN_ONCE) while holding
 * run_mu, one epoll_wait per wake where the sleep set and the pass that follows cost two. A lead
 * tried meanwhile is refused (as when the loop thread is in any pass), and wakes the loop thread
 * through lead_async when it sleeps so (in_loop_sleep); it then sleeps outside the loop, as
 * above, while leads stay recent, and the next lead finds run_mu free. The try is stamped
 * (lead_try_ms) before the trylock and in_loop_sleep set before the loop thread checks the stamp
 * again, both seq_cst: either the loop thread sees the try and does not sleep in the loop, or the
 * refused thread sees it asleep there and wakes it. No lead waits for the loop thread: a caller
 * that is refused posts its work (which wakes the loop as any post does).
 *
 * The loop thread never blocks on run_mu: when a leader holds it (LOOP_BUSY), the leader runs the
 * loop's timers and I/O, and the loop thread sleeps on kick_fd alone for at most
 * LEAD_IO_GRACE_MS before it tries again (blocking on the mutex made each of a run of leaders
 * wake it with a futex call as it let go, only to take the mutex back first).
 *
 * Invariants:
 *   - at most one thread runs the loop; tl_running names the env_uv_thread whose loop the calling
 *     thread runs (the loop thread for its whole life, a leader while it leads), and a thread
 *     runs at most one loop at a time (a loop thread or leader never leads another);
 *   - the loop thread holds run_mu while it sleeps only inside a UV_RUN_ONCE pass, with
 *     in_loop_sleep set, and only when no lead was tried nor let go within LEAD_RECENT_MS;
 *   - the loop thread sleeps outside the loop only right after a pass of its own, for the
 *     uv_backend_timeout() that pass ended with, bounded by LEAD_IO_GRACE_MS while io_on is false
 *     (park_until_ms, written under run_mu, `parked` set before run_mu is let go), or for at most
 *     LEAD_IO_GRACE_MS while a leader holds the loop; a leader that leaves work due sooner than
 *     the loop thread's sleep ends (a timer it armed, pending or closing callbacks, an ended loop)
 *     writes kick_fd before it lets go of run_mu, so no work waits for an unrelated wake-up;
 *   - io_on is false only while a thread leads, or while leads let go within LEAD_IO_GRACE_MS of
 *     each other and no thread waits without leading; the loop thread's sleep is then bounded by
 *     LEAD_IO_GRACE_MS;
 *   - stopping is set once, by env_uv_thread_stop(); no lead starts after it, and a leader that
 *     sees it stops at its next turn. After run_mu is let go, a leader touches nothing of t (stop
 *     may free it as soon as the loop thread has run the loop to its end).
 *
 * Thread states:
 *
 *   RUNNING --env_uv_thread_stop()--> STOPPING --loop ended, joined--> (freed)
 *
 * stop_async is referenced, so the loop stays alive while RUNNING; on_stop (run by whoever runs
 * the loop) frees the env and closes stop_async, after which the loop ends once the user's
 * handles are closed, and the loop thread returns.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/util.h"
#include "env/clock.h"
#include "env/env_thread.h"
#include "env/env_uv.h"

#define PARK_FOREVER UINT64_MAX
#define LOOP_ENDED   (-2) /* loop_pass: the loop has no more work: the loop thread returns */
#define LOOP_BUSY    (-3) /* loop_pass: a leader runs the loop: wait for it (lead_wait) */
/* Passes (UV_RUN_NOWAIT) a leader runs before it lets go, while work is due at once and the loop
 * thread sleeps: bounded, so a loop that keeps itself busy is handed back, not held. */
#define LEAD_FLUSH_PASSES 2
/* While leads come within this many ms of each other, the loop's I/O stays with the leaders and
 * the loop thread sleeps at most this long at a time (file comment). */
#define LEAD_IO_GRACE_MS 1
/* The loop thread sleeps inside the loop's own poll (UV_RUN_ONCE, holding run_mu) once no thread
 * has tried to lead, nor let go of a lead, for this many ms (file comment, "A loop nobody
 * leads"). */
#define LEAD_RECENT_MS ENV_UV_LEAD_RECENT_MS

struct env_uv_thread {
    uv_loop_t loop;
    env_t *env;
    uv_thread_t tid; /* as returned by uv_thread_create (for join) */
    uv_sem_t started;
    uv_async_t stop_async;
    uv_timer_t
        lead_timer; /* [run_mu] bounds a leader's UV_RUN_ONCE by its deadline; unreferenced */
    atomic_bool stopping;
    pthread_mutex_t run_mu;    /* held by the thread that runs the loop (see the file comment) */
    int backend_fd;            /* uv_backend_fd(&loop), fixed at start */
    int kick_fd;               /* eventfd: a leader wakes the sleeping loop thread through it */
    int park_fd;               /* epoll set the loop thread sleeps on: backend_fd (armed while
                                * io_on) and kick_fd */
    uint64_t park_until_ms;    /* [run_mu] when the loop thread's sleep times out (PARK_FOREVER) */
    atomic_bool parked;        /* the loop thread is asleep (or about to be) after its last pass */
    atomic_bool io_on;         /* [written under run_mu] backend_fd armed in park_fd */
    uint64_t last_lead_end_ms; /* [run_mu] when the last lead let go (0: none yet) */
    atomic_int waiters;        /* threads waiting for work on the loop without leading it */
    uv_async_t lead_async;     /* a refused lead wakes the loop thread out of its in-loop sleep */
    atomic_uint_fast64_t lead_try_ms; /* when a thread last tried to lead (0: never) */
    atomic_bool in_loop_sleep; /* the loop thread holds run_mu for a blocking UV_RUN_ONCE pass */
    atomic_uint_fast64_t n_led, n_refused, n_kicks, n_io_ctl; /* env_uv_thread_stats */
    atomic_uint_fast64_t n_polls, n_loop_sleeps, n_lead_wakes;
};

static _Thread_local env_uv_thread_t *tl_running;

/* ---- the loop thread ------------------------------------------------------------------------ */

static void park_on_io(env_uv_thread_t *t, bool on);

/* Whether leads come often enough that the loop's I/O is left to them (see the file comment):
 * the last one let go at most LEAD_IO_GRACE_MS before now and no thread waits for the loop
 * without leading it. Under run_mu. */
static bool leads_frequent(env_uv_thread_t *t, uint64_t now)
{
    return t->last_lead_end_ms != 0 && now <= t->last_lead_end_ms + LEAD_IO_GRACE_MS &&
           atomic_load(&t->waiters) == 0;
}

/* Whether a thread tried to lead, or let go of a lead, within LEAD_RECENT_MS of now: the loop
 * thread then sleeps outside the loop, where a lead can take it (file comment). Under run_mu. */
static bool leads_recent(env_uv_thread_t *t, uint64_t now)
{
    uint64_t last = atomic_load(&t->lead_try_ms);
    if (t->last_lead_end_ms > last)
        last = t->last_lead_end_ms;
    return last != 0 && now < last + LEAD_RECENT_MS;
}

/* Whether the loop thread's next sleep is inside the loop (UV_RUN_ONCE under run_mu): no lead
 * recently. Sets in_loop_sleep first and checks again, so a thread whose lead is refused from
 * now on either was seen here or sees in_loop_sleep and wakes the loop (env_uv_thread_lead).
 * Under run_mu. */
static bool sleep_in_loop(env_uv_thread_t *t, uint64_t now)
{
    if (leads_recent(t, now))
        return false;
    atomic_store(&t->in_loop_sleep, true);
    if (leads_recent(t, now)) {
        atomic_store(&t->in_loop_sleep, false);
        return false;
    }
    return true;
}

/* One pass of the loop under run_mu. Returns the timeout (ms, -1 = none) for the sleep that
 * follows (0 also after a pass that slept in the loop itself: the next pass follows at once),
 * LOOP_ENDED, or LOOP_BUSY when a leader holds the loop (the loop thread never blocks on run_mu:
 * a leader that lets go and takes it again at once would wake it each time, in vain). */
static int loop_pass(env_uv_thread_t *t)
{
    if (pthread_mutex_trylock(&t->run_mu) != 0)
        return LOOP_BUSY;
    int tmo = LOOP_ENDED;
    atomic_fetch_add(&t->n_polls, 1); /* each pass polls the loop's epoll once */
    if (sleep_in_loop(t, env_clock_mono_ms())) {
        park_on_io(t, true); /* (already on, unless leads stopped just now) */
        atomic_fetch_add(&t->n_loop_sleeps, 1);
        int alive = uv_run(&t->loop, UV_RUN_ONCE);
        atomic_store(&t->in_loop_sleep, false);
        pthread_mutex_unlock(&t->run_mu);
        return alive ? 0 : LOOP_ENDED;
    }
    if (uv_run(&t->loop, UV_RUN_NOWAIT) != 0) {
        tmo = uv_backend_timeout(&t->loop);
        uint64_t now = env_clock_mono_ms();
        if (tmo != 0 && !atomic_load(&t->io_on)) {
            if (leads_frequent(t, now))
                tmo = tmo < 0 || tmo > LEAD_IO_GRACE_MS ? LEAD_IO_GRACE_MS : tmo;
            else
                park_on_io(t, true); /* leads stopped: the loop thread watches I/O again */
        }
        t->park_until_ms = tmo < 0 ? PARK_FOREVER : now + (uint64_t)tmo;
        atomic_store(&t->parked, tmo != 0); /* 0: the next pass follows at once, no sleep */
        /* A post that came after this pass polled, while I/O does not wake the sleep: it either
         * is seen here or sees parked and kicks (post_kick). */
        if (tmo != 0 && !atomic_load(&t->io_on) && env_uv_post_pending(t->env)) {
            atomic_store(&t->parked, false);
            tmo = 0;
        }
    }
    pthread_mutex_unlock(&t->run_mu);
    return tmo;
}

/* A leader holds the loop: it runs the loop's timers and I/O meanwhile. Sleeps until a kick or
 * LEAD_IO_GRACE_MS, then the loop thread tries again. */
static void lead_wait(env_uv_thread_t *t)
{
    struct pollfd p = {.fd = t->kick_fd, .events = POLLIN};
    atomic_fetch_add(&t->n_polls, 1);
    if (poll(&p, 1, LEAD_IO_GRACE_MS) > 0) {
        uint64_t v;
        ssize_t r = read(t->kick_fd, &v, sizeof(v)); /* resets the eventfd; EAGAIN: raced */
        (void)r;
    }
}

static void kick(env_uv_thread_t *t)
{
    uint64_t one = 1;
    ssize_t n = write(t->kick_fd, &one, sizeof(one)); /* EAGAIN: a kick is pending already */
    (void)n;
    atomic_fetch_add(&t->n_kicks, 1);
}

/* A leader's kick (under run_mu): the loop thread wakes and runs a pass; until then it counts as
 * awake, so the next leaders do not kick it again while it has not run yet (a loaded host). */
static void lead_kick(env_uv_thread_t *t)
{
    kick(t);
    atomic_store(&t->parked, false);
}

/* env_post hook (any thread): a post wakes the loop through libuv's async fd, which wakes the
 * sleeping loop thread only while its I/O is watched; otherwise it is kicked. */
static void post_kick(void *ctx)
{
    env_uv_thread_t *t = ctx;
    if (atomic_load(&t->parked) && !atomic_load(&t->io_on))
        kick(t);
}

/* Sleeps until the loop has I/O ready (while no thread leads), a leader kicks, or tmo ms pass (a
 * timer is due). */
static void park(env_uv_thread_t *t, int tmo)
{
    struct epoll_event ev[2];
    atomic_fetch_add(&t->n_polls, 1);
    int n = epoll_wait(t->park_fd, ev, 2, tmo); /* (EINTR: an early wake; the next pass copes) */
    atomic_store(&t->parked, false);
    for (int i = 0; i < n; i++)
        if (ev[i].data.fd == t->kick_fd) {
            uint64_t v;
            ssize_t r = read(t->kick_fd, &v, sizeof(v)); /* resets the eventfd; EAGAIN: raced */
            (void)r;
        }
}

/* Whether the loop's I/O wakes the sleeping loop thread: off while a thread leads (the leader
 * waits in the loop's epoll itself; an answer for it must not wake a second thread), on again
 * when it lets go (an event left pending then wakes the loop thread at once). Under run_mu. */
static void park_on_io(env_uv_thread_t *t, bool on)
{
    if (atomic_load(&t->io_on) == on)
        return;
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.fd = t->backend_fd};
    int rc = epoll_ctl(t->park_fd, EPOLL_CTL_MOD, t->backend_fd, &ev);
    KVM_ASSERT(rc == 0); /* both fds are open and registered for the thread's life */
    atomic_store(&t->io_on, on);
    atomic_fetch_add(&t->n_io_ctl, 1);
}

/* The loop thread's sleep set; 0 or -1 with errno. */
static int park_open(env_uv_thread_t *t)
{
    t->park_fd = epoll_create1(EPOLL_CLOEXEC);
    if (t->park_fd < 0)
        return -1;
    struct epoll_event b = {.events = EPOLLIN, .data.fd = t->backend_fd};
    struct epoll_event k = {.events = EPOLLIN, .data.fd = t->kick_fd};
    if (epoll_ctl(t->park_fd, EPOLL_CTL_ADD, t->backend_fd, &b) != 0 ||
        epoll_ctl(t->park_fd, EPOLL_CTL_ADD, t->kick_fd, &k) != 0)
        return -1;
    return 0;
}

static void thread_main(void *arg)
{
    env_uv_thread_t *t = arg;
    tl_running = t;
    uv_sem_post(&t->started);
    int tmo;
    while ((tmo = loop_pass(t)) != LOOP_ENDED) {
        if (tmo == LOOP_BUSY)
            lead_wait(t);
        else if (tmo != 0) /* 0: work due at once: the next pass polls the loop's I/O itself */
            park(t, tmo);
    }
    tl_running = NULL;
}

static void on_lead_async(uv_async_t *h)
{
    (void)h; /* the wake is all: the pass it ends lets go of run_mu */
}

static void on_stop(uv_async_t *h)
{
    env_uv_thread_t *t = h->data;
    env_uv_free(t->env);
    uv_close((uv_handle_t *)&t->stop_async, NULL);
    uv_close((uv_handle_t *)&t->lead_timer, NULL);
    uv_close((uv_handle_t *)&t->lead_async, NULL);
}

/* ---- start / stop --------------------------------------------------------------------------- */

/* Undoes a start that failed after the env and stop_async were set up (caller's thread). */
static void start_unwind(env_uv_thread_t *t)
{
    env_uv_free(t->env);
    uv_close((uv_handle_t *)&t->stop_async, NULL);
    uv_close((uv_handle_t *)&t->lead_timer, NULL);
    uv_close((uv_handle_t *)&t->lead_async, NULL);
}

int env_uv_thread_start(env_uv_thread_t **out, env_node_t self)
{
    KVM_ASSERT(out != NULL);
    *out = NULL;
    env_uv_thread_t *t = calloc(1, sizeof(*t));
    if (!t)
        return KVMESH_ENOMEM;
    atomic_init(&t->stopping, false);
    atomic_init(&t->parked, false);
    atomic_init(&t->n_led, 0);
    atomic_init(&t->n_refused, 0);
    atomic_init(&t->n_kicks, 0);
    atomic_init(&t->n_io_ctl, 0);
    atomic_init(&t->io_on, true);
    atomic_init(&t->waiters, 0);
    atomic_init(&t->lead_try_ms, 0);
    atomic_init(&t->in_loop_sleep, false);
    atomic_init(&t->n_polls, 0);
    atomic_init(&t->n_loop_sleeps, 0);
    atomic_init(&t->n_lead_wakes, 0);
    t->kick_fd = t->park_fd = -1;
    int rc = uv_loop_init(&t->loop);
    if (rc != 0) {
        free(t);
        return kvm_errf(KVMESH_EIO, "uv_loop_init failed: %s", uv_strerror(rc));
    }
    t->backend_fd = uv_backend_fd(&t->loop);
    rc = env_uv_new(&t->env, &t->loop, self);
    if (rc != 0)
        goto fail_loop;
    rc = uv_async_init(&t->loop, &t->stop_async, on_stop);
    if (rc != 0) {
        env_uv_free(t->env);
        rc = kvm_errf(KVMESH_EIO, "uv_async_init failed: %s", uv_strerror(rc));
        goto fail_loop;
    }
    t->stop_async.data = t;
    env_uv_set_post_hook(t->env, post_kick, t);
    uv_timer_init(&t->loop, &t->lead_timer); /* cannot fail */
    uv_unref((uv_handle_t *)&t->lead_timer);
    /* (a loop's asyncs share one eventfd, made by the env's first one: this init cannot fail) */
    rc = uv_async_init(&t->loop, &t->lead_async, on_lead_async);
    KVM_ASSERT(rc == 0);
    uv_unref((uv_handle_t *)&t->lead_async);
    t->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->kick_fd < 0 || park_open(t) != 0) {
        start_unwind(t);
        rc = kvm_errf(KVMESH_EIO, "eventfd/epoll failed: %s; check the fd limit", strerror(errno));
        goto fail_loop;
    }
    pthread_mutex_init(&t->run_mu, NULL);
    if (uv_sem_init(&t->started, 0) != 0) {
        pthread_mutex_destroy(&t->run_mu);
        start_unwind(t);
        rc = kvm_errf(KVMESH_EIO, "uv_sem_init failed");
        goto fail_loop;
    }
    sigset_t old_mask;
    env_sigpipe_block(&old_mask); /* the loop thread inherits it: see env_thread.h */
    rc = uv_thread_create(&t->tid, thread_main, t);
    env_sigmask_restore(&old_mask);
    if (rc != 0) {
        uv_sem_destroy(&t->started);
        pthread_mutex_destroy(&t->run_mu);
        start_unwind(t);
        rc = kvm_errf(KVMESH_EIO, "uv_thread_create failed: %s", uv_strerror(rc));
        goto fail_loop;
    }
    uv_sem_wait(&t->started);
    *out = t;
    return 0;
fail_loop:
    uv_run(&t->loop, UV_RUN_DEFAULT); /* runs pending close callbacks */
    uv_loop_close(&t->loop);
    if (t->kick_fd >= 0)
        close(t->kick_fd);
    if (t->park_fd >= 0)
        close(t->park_fd);
    free(t);
    return rc;
}

void env_uv_thread_stop(env_uv_thread_t *t)
{
    if (!t)
        return;
    KVM_ASSERT(!env_uv_thread_is_current(t)); /* neither the loop thread nor a leader */
    bool was = atomic_exchange(&t->stopping, true);
    KVM_ASSERT(!was);
    uv_async_send(&t->stop_async); /* also wakes a leader, which then lets go */
    kick(t);                       /* and the loop thread, also while its I/O is not watched */
    uv_thread_join(&t->tid);
    int rc = uv_loop_close(&t->loop);
    KVM_ASSERT(rc == 0); /* a handle left open on the loop is a programmer error */
    uv_sem_destroy(&t->started);
    pthread_mutex_destroy(&t->run_mu);
    close(t->kick_fd);
    close(t->park_fd);
    free(t);
}

env_t *env_uv_thread_env(env_uv_thread_t *t)
{
    return t->env;
}

bool env_uv_thread_is_current(env_uv_thread_t *t)
{
    return tl_running == t;
}

bool env_uv_thread_parked(env_uv_thread_t *t)
{
    if (atomic_load(&t->parked))
        return true;
    /* Asleep in the loop's own poll, where no lead can take the loop: a lead is wanted (the
     * caller asks in order to lead next), as if one were tried and refused (sleep_in_loop). */
    atomic_store(&t->lead_try_ms, env_clock_mono_ms());
    if (atomic_load(&t->in_loop_sleep)) {
        uv_async_send(&t->lead_async);
        atomic_fetch_add(&t->n_lead_wakes, 1);
    }
    return false;
}

void env_uv_thread_stats(env_uv_thread_t *t, env_uv_thread_stats_t *out)
{
    out->led = atomic_load(&t->n_led);
    out->refused = atomic_load(&t->n_refused);
    out->kicks = atomic_load(&t->n_kicks);
    out->io_toggles = atomic_load(&t->n_io_ctl);
    out->polls = atomic_load(&t->n_polls);
    out->loop_sleeps = atomic_load(&t->n_loop_sleeps);
    out->lead_wakes = atomic_load(&t->n_lead_wakes);
}

void env_uv_thread_waiting(env_uv_thread_t *t, bool begin)
{
    if (begin)
        atomic_fetch_add(&t->waiters, 1);
    else
        atomic_fetch_sub(&t->waiters, 1);
}

/* ---- leading -------------------------------------------------------------------------------- */

/* What a leader saves of its own thread and puts back when it lets go. */
struct lead_save {
    char err[512];
};

static void lead_enter(env_uv_thread_t *t, struct lead_save *sv)
{
    /* Loop callbacks report failures with kvm_errf: their messages must not reach the caller.
     * (Their socket writes raise no SIGPIPE: MSG_NOSIGNAL, env_thread.h; no mask is set.) */
    const char *e = kvmesh_last_error();
    size_t n = strlen(e);
    KVM_ASSERT(n < sizeof(sv->err)); /* the thread's message buffer is that size */
    memcpy(sv->err, e, n + 1);
    tl_running = t;
    park_on_io(t, false);
}

/* Before a leader lets go: when the loop thread sleeps, runs the work due at once (at most
 * LEAD_FLUSH_PASSES passes), then wakes the loop thread if it would sleep past work left behind
 * (a timer due sooner than its sleep ends, more work due at once, an ended loop). */
static void lead_hand_back(env_uv_thread_t *t)
{
    if (!atomic_load(&t->parked))
        return;                             /* awake: it runs a pass as soon as it has run_mu */
    int tmo = uv_backend_timeout(&t->loop); /* 0: work pending now, or the loop ended */
    /* Work due now that the caller's own passes left (write callbacks, deferred callbacks): a
     * pass or two here, without waiting, costs less than waking the loop thread for it. */
    for (int i = 0; tmo == 0 && i < LEAD_FLUSH_PASSES && !atomic_load(&t->stopping); i++) {
        if (uv_run(&t->loop, UV_RUN_NOWAIT) == 0)
            break; /* the loop ended: the loop thread must wake to return */
        tmo = uv_backend_timeout(&t->loop);
    }
    if (tmo < 0 || env_clock_mono_ms() + (uint64_t)tmo >= t->park_until_ms)
        return;
    lead_kick(t);
}

/* Whether the loop thread watches the loop's I/O after this lead: an isolated lead gives it back
 * at once (as it was). A lead that began within LEAD_IO_GRACE_MS of the last one's end leaves it
 * with the leaders (no epoll_ctl pair per lead while leads are frequent): the loop thread then
 * sleeps at most LEAD_IO_GRACE_MS at a time (kicked here when it sleeps longer) and watches I/O
 * again at its first pass after the leads stopped. Under run_mu. */
static void lead_io_after(env_uv_thread_t *t, uint64_t started_ms)
{
    bool frequent = leads_frequent(t, started_ms);
    uint64_t now = env_clock_mono_ms();
    t->last_lead_end_ms = now;
    if (!frequent)
        park_on_io(t, true);
    else if (atomic_load(&t->parked) && t->park_until_ms > now + LEAD_IO_GRACE_MS)
        lead_kick(t); /* asleep with I/O unwatched past the grace: it re-parks, bounded */
}

static void lead_leave(env_uv_thread_t *t, const struct lead_save *sv, uint64_t started_ms)
{
    uv_timer_stop(&t->lead_timer); /* (a no-op when not armed, or closed by on_stop) */
    lead_hand_back(t);
    lead_io_after(t, started_ms);
    tl_running = NULL;
    pthread_mutex_unlock(&t->run_mu); /* t may be freed from here on (file comment) */
    if (sv->err[0])
        kvm_errf(0, "%s", sv->err);
    else
        kvm_err_clear();
}

static void on_lead_timer(uv_timer_t *h)
{
    /* Bounds the leader's wait in the loop's epoll. It may fire in the timer phase at the start of
     * the leader's pass (early, by the loop's cached time): the pass's poll would then block with
     * no timer left, for good if nothing else comes. uv_stop makes that poll return at once; the
     * leader checks its deadline and re-arms. */
    uv_stop(h->loop);
}

/* Runs the loop until done(darg), the deadline, or the end of the loop. */
static enum env_uv_lead lead_run(env_uv_thread_t *t, env_uv_done_fn done, void *darg,
                                 uint64_t deadline_ms)
{
    for (;;) {
        if (done(darg))
            return ENV_UV_LEAD_DONE;
        if (atomic_load(&t->stopping))
            return ENV_UV_LEAD_STOPPED;
        if (deadline_ms) {
            uint64_t now = env_clock_mono_ms();
            if (now >= deadline_ms)
                return ENV_UV_LEAD_DEADLINE;
            /* UV_RUN_ONCE blocks for the loop's next timer, computed after the pass's callbacks
             * (which may cancel the timer that was next): this one bounds it by the deadline,
             * measured from now (the loop's cached time may be far behind: armed from it, it
             * fired in the pass's own timer phase, and the pass's poll blocked with no timer
             * left). At most a ms early by rounding: on_lead_timer ends the pass at once either
             * way, and the leader re-arms it. */
            uv_update_time(&t->loop);
            uv_timer_start(&t->lead_timer, on_lead_timer, deadline_ms - now, 0);
        }
        if (uv_run(&t->loop, UV_RUN_ONCE) == 0)
            return done(darg) ? ENV_UV_LEAD_DONE : ENV_UV_LEAD_STOPPED; /* the loop ended */
    }
}

enum env_uv_lead env_uv_thread_lead(env_uv_thread_t *t, env_cb cb, void *arg, env_uv_done_fn done,
                                    void *darg, uint64_t deadline_ms)
{
    KVM_ASSERT(t != NULL && cb != NULL && done != NULL);
    if (tl_running || atomic_load(&t->stopping)) {
        atomic_fetch_add(&t->n_refused, 1);
        return ENV_UV_LEAD_REFUSED;
    }
    uint64_t started_ms = env_clock_mono_ms();
    atomic_store(&t->lead_try_ms, started_ms);
    if (pthread_mutex_trylock(&t->run_mu) != 0) {
        /* The loop thread sleeping in the loop holds run_mu: wake it, so that it sleeps outside
         * the loop from its next pass on and a lead tried then finds the loop free
         * (sleep_in_loop: either it saw the try above, or this sees in_loop_sleep). */
        if (atomic_load(&t->in_loop_sleep)) {
            uv_async_send(&t->lead_async);
            atomic_fetch_add(&t->n_lead_wakes, 1);
        }
        atomic_fetch_add(&t->n_refused, 1);
        return ENV_UV_LEAD_REFUSED;
    }
    if (atomic_load(&t->stopping)) { /* (stop began between the check and the lock) */
        pthread_mutex_unlock(&t->run_mu);
        atomic_fetch_add(&t->n_refused, 1);
        return ENV_UV_LEAD_REFUSED;
    }
    atomic_fetch_add(&t->n_led, 1);
    struct lead_save sv;
    lead_enter(t, &sv);
    cb(arg);
    enum env_uv_lead res = lead_run(t, done, darg, deadline_ms);
    lead_leave(t, &sv, started_ms);
    return res;
}

/* ---- calls from other threads --------------------------------------------------------------- */

typedef struct thread_call {
    env_cb cb;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} thread_call_t;

static void thread_call_tramp(void *arg)
{
    thread_call_t *c = arg;
    c->cb(c->arg);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* env_post from another thread, retrying a full post queue for up to ~1 s. */
static int thread_post(env_uv_thread_t *t, env_cb cb, void *arg)
{
    if (atomic_load(&t->stopping))
        return KVMESH_ECLOSED;
    int rc;
    for (int tries = 0;; tries++) {
        rc = env_post(t->env, cb, arg);
        if (rc != KVMESH_EAGAIN || tries >= 1000)
            return rc;
        uv_sleep(1);
    }
}

int env_uv_thread_post(env_uv_thread_t *t, env_cb cb, void *arg)
{
    KVM_ASSERT(t != NULL && cb != NULL && !env_uv_thread_is_current(t));
    return thread_post(t, cb, arg);
}

int env_uv_thread_call(env_uv_thread_t *t, env_cb cb, void *arg)
{
    KVM_ASSERT(t != NULL && cb != NULL);
    if (env_uv_thread_is_current(t)) {
        cb(arg);
        return 0;
    }
    thread_call_t c = {.cb = cb, .arg = arg};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    env_uv_thread_waiting(t, true);
    int rc = thread_post(t, thread_call_tramp, &c);
    if (rc == 0) {
        pthread_mutex_lock(&c.mu);
        while (!c.done)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
    }
    env_uv_thread_waiting(t, false);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    return rc;
}
