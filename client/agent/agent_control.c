#include "agent_control.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* rdzv_join's own default, for the first join's deadline. */
#define RDZV_AGENT_JOIN_TIMEOUT_MS 60000

struct rdzv_agent_control {
    rdzv_agent_control_args_t args;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int event_fd;
    /* guarded by lock */
    bool stop;
    bool rejoin;
    bool busy;                 /* the thread is inside a request */
    int serving;               /* what the next heartbeat says of the engine: -1 nothing */
    bool poke;                 /* serving changed: heartbeat now */
    /* rdzv_agent_control_drain: asked for (serving stays 0), then done
     * once the router let the rank go or the deadline passed. */
    bool draining, drained;
    int64_t drain_deadline_ms;
    rdzv_assignment_t *fresh;  /* not yet taken by the main thread */
    int exit_code;             /* != 0: the first join failed */
    char error[640];            /* librdzv's reason (up to 512) and a prefix */
    char first_session[RDZV_MAX_NAME + 1];   /* used by the first client only */
};

static void s_notify(rdzv_agent_control_t *self)
{
    uint64_t one = 1;
    ssize_t rc = write(self->event_fd, &one, sizeof one);
    (void) rc;
}

static void s_publish(rdzv_agent_control_t *self, rdzv_assignment_t **a)
{
    pthread_mutex_lock(&self->lock);
    rdzv_assignment_destroy(&self->fresh);
    self->fresh = *a;
    *a = NULL;
    pthread_mutex_unlock(&self->lock);
    s_notify(self);
}

static void s_fail(rdzv_agent_control_t *self, int code, const char *why)
{
    pthread_mutex_lock(&self->lock);
    self->exit_code = code;
    snprintf(self->error, sizeof self->error, "%s", why);
    pthread_mutex_unlock(&self->lock);
    s_notify(self);
}

/* Waits up to ms; returns false when the thread must stop. */
static bool s_wait(rdzv_agent_control_t *self, int ms)
{
    struct timespec until;
    rdzv_timespec_after(CLOCK_MONOTONIC, ms, &until);
    pthread_mutex_lock(&self->lock);
    self->busy = false;
    while (!self->stop && !self->rejoin && !self->poke) {
        if (pthread_cond_timedwait(&self->wake, &self->lock, &until) == ETIMEDOUT)
            break;
    }
    bool go_on = !self->stop;
    self->busy = go_on;
    self->poke = false;
    pthread_mutex_unlock(&self->lock);
    return go_on;
}

static int s_serving(rdzv_agent_control_t *self)
{
    pthread_mutex_lock(&self->lock);
    int serving = self->serving;
    pthread_mutex_unlock(&self->lock);
    return serving;
}

void rdzv_agent_control_set_serving(rdzv_agent_control_t *self, int serving)
{
    pthread_mutex_lock(&self->lock);
    if (serving != self->serving && !self->draining) {
        self->serving = serving;
        self->poke = true;
        pthread_cond_signal(&self->wake);
    }
    pthread_mutex_unlock(&self->lock);
}

/* Whether the array key of status_json's (the status op's groups) group has
 * rank's entry with one of the flags true. */
static bool s_flagged(const char *status_json, const char *group, const char *key, int rank,
                      const char *flag1, const char *flag2)
{
    cJSON *groups = cJSON_Parse(status_json);
    bool set = false;
    const cJSON *g, *m;
    cJSON_ArrayForEach(g, groups) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "group");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, group) != 0)
            continue;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(g, key)) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "rank");
            if (cJSON_IsNumber(r) && r->valueint == rank)
                set = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, flag1))
                      || (flag2 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, flag2)));
        }
    }
    cJSON_Delete(groups);
    return set;
}

/* Whether group's router still lists rank, ready or draining: false too
 * when the group names no router. */
static bool s_registered(const char *status_json, const char *group, int rank)
{
    return s_flagged(status_json, group, "members", rank, "registered", "draining");
}

/* Whether rank is one a shrink dropped that the router may still list. */
static bool s_leaving(const char *status_json, const char *group, int rank)
{
    return s_flagged(status_json, group, "leaving", rank, "registered", NULL);
}

static int64_t s_now_ms(void);

/* The drain: heartbeats that say "not serving" until rdzvd's status shows
 * the router let this rank go, or the deadline. */
static void s_drain(rdzv_agent_control_t *self, rdzv_client_t *client, int64_t epoch)
{
    const char *group = self->args.join.group;
    int rank = self->args.join.rank;
    for (;;) {
        int64_t now = epoch;
        rdzv_heartbeat_serving(client, group, rank, epoch, 0, &now);
        char *json = NULL;
        bool gone = rdzv_status(client, group, &json) == RDZV_OK
                    && !s_registered(json, group, rank);
        free(json);
        pthread_mutex_lock(&self->lock);
        bool late = s_now_ms() >= self->drain_deadline_ms || self->stop;
        pthread_mutex_unlock(&self->lock);
        if (gone || late) {
            if (self->args.router)
                fprintf(stderr, "rdzv agent: group %s rank %d: %s\n", group, rank,
                        gone ? "the router let this rank go"
                             : "the router still lists this rank; going on");
            break;
        }
        struct timespec pause = { .tv_nsec = 500 * 1000000L };
        nanosleep(&pause, NULL);
    }
    pthread_mutex_lock(&self->lock);
    self->drained = true;
    pthread_cond_broadcast(&self->wake);
    pthread_mutex_unlock(&self->lock);
    s_notify(self);
}

void rdzv_agent_control_drain_start(rdzv_agent_control_t *self, int timeout_ms)
{
    pthread_mutex_lock(&self->lock);
    if (!self->draining) {
        self->draining = true;
        self->serving = 0;
        self->poke = true;
        self->drain_deadline_ms = s_now_ms() + timeout_ms;
        pthread_cond_broadcast(&self->wake);
    }
    pthread_mutex_unlock(&self->lock);
}

void rdzv_agent_control_undrain(rdzv_agent_control_t *self)
{
    pthread_mutex_lock(&self->lock);
    if (!self->draining || self->drained) {
        self->draining = self->drained = false;
        self->serving = -1;
        self->poke = true;
        pthread_cond_broadcast(&self->wake);
    }
    pthread_mutex_unlock(&self->lock);
}

bool rdzv_agent_control_drained(rdzv_agent_control_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool drained = self->drained;
    pthread_mutex_unlock(&self->lock);
    return drained;
}

bool rdzv_agent_control_drain(rdzv_agent_control_t *self, int timeout_ms)
{
    struct timespec until;
    /* A second more than the thread's own deadline: it may be inside a
     * request when the drain is asked for. */
    rdzv_timespec_after(CLOCK_MONOTONIC, timeout_ms + 1000, &until);
    rdzv_agent_control_drain_start(self, timeout_ms);
    pthread_mutex_lock(&self->lock);
    while (!self->drained && !self->stop && self->exit_code == 0)
        if (pthread_cond_timedwait(&self->wake, &self->lock, &until) == ETIMEDOUT)
            break;
    bool drained = self->drained;
    pthread_mutex_unlock(&self->lock);
    return drained;
}

static bool s_take_rejoin(rdzv_agent_control_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool rejoin = self->rejoin;
    self->rejoin = false;
    pthread_mutex_unlock(&self->lock);
    return rejoin;
}

static int64_t s_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

#define S_TAKEN_RETRY_MS 500

/* The first join retries what may pass before its timeout: rdzvd away
 * (io), and rank_taken, the waiter of a killed agent for this rank, which
 * rdzvd drops at that waiter's deadline. Not past --timeout: an I/O error
 * that lasts (no route to the server) would otherwise keep the agent
 * retrying, and the Pod waiting, for ever. */
static bool s_retry_first(rdzv_client_t *client, int rc, int64_t deadline_ms)
{
    if (s_now_ms() >= deadline_ms)
        return false;
    return rc == RDZV_ERR_IO
           || (rc == RDZV_ERR_REFUSED
               && strcmp(rdzv_client_error_code(client), "rank_taken") == 0);
}

/* A first join that failed for good: exit 3 when --timeout ran out, I/O
 * errors retried until then included (as rdzv join's timeout), with the
 * last reason. */
static void s_first_failed(rdzv_agent_control_t *self, rdzv_client_t *client, int rc,
                           int timeout_ms)
{
    char why[sizeof self->error];
    if (rc == RDZV_ERR_IO) {
        snprintf(why, sizeof why, "timed out: %s; timeout %g s", rdzv_client_error(client),
                 timeout_ms / 1000.0);
        s_fail(self, 3, why);
        return;
    }
    s_fail(self, rc == RDZV_ERR_TIMEOUT ? 3 : rc == RDZV_ERR_REFUSED
                                              ? RDZV_AGENT_EXIT_REFUSED : 1,
           rdzv_client_error(client));
}

/* How long to pause before joining again: a taken rank comes free at the
 * old waiter's deadline, so look again soon, as rdzv join does, not a
 * heartbeat later; and a first join not past its deadline. */
static int s_pause_ms(const rdzv_agent_control_t *self, bool taken, bool first,
                      int64_t deadline_ms)
{
    int pause = taken && self->args.heartbeat_ms > S_TAKEN_RETRY_MS ? S_TAKEN_RETRY_MS
                                                                    : self->args.heartbeat_ms;
    int64_t left = deadline_ms - s_now_ms();
    if (first && left < pause)
        pause = left > 0 ? (int) left : 0;
    return pause;
}

/* Joins until it succeeds; only the first join may fail for good. */
static int64_t s_join(rdzv_agent_control_t *self, rdzv_client_t *client, bool first)
{
    rdzv_join_args_t args = self->args.join;
    int timeout_ms = args.timeout_ms > 0 ? args.timeout_ms : RDZV_AGENT_JOIN_TIMEOUT_MS;
    int64_t deadline_ms = s_now_ms() + timeout_ms;
    bool taken = false;        /* once refused rank_taken */
    for (bool again = false;; again = true) {
        rdzv_assignment_t *a = NULL;
        if (first && again) {  /* a retried first join: only what is left */
            int64_t left = deadline_ms - s_now_ms();
            args.timeout_ms = left > 0 ? (int) left : 1;
        }
        int rc = rdzv_join(client, &args, &a);
        if (rc == RDZV_OK) {
            int64_t epoch = rdzv_assignment_epoch(a);
            /* The group's world, which a resize may have changed: a later
             * join under a new session (a replaced engine) must say it. */
            self->args.join.world = rdzv_assignment_world(a);
            fprintf(stderr, "rdzv agent: group %s rank %d: epoch %lld\n",
                    self->args.join.group, self->args.join.rank, (long long) epoch);
            s_publish(self, &a);
            return epoch;
        }
        if (first && !s_retry_first(client, rc, deadline_ms)) {
            s_first_failed(self, client, rc, timeout_ms);
            return -1;
        }
        taken = taken || (first && rc == RDZV_ERR_REFUSED);
        fprintf(stderr, "rdzv agent: join: %s; retrying\n", rdzv_client_error(client));
        if (!s_wait(self, s_pause_ms(self, taken, first, deadline_ms)))
            return -1;
    }
}

static rdzv_client_t *s_new_client(rdzv_agent_control_t *self)
{
    char err[256] = "";
    const char *session = *self->first_session ? self->first_session : NULL;
    rdzv_client_t *client = rdzv_client_new(self->args.endpoint, session, err, sizeof err);
    self->first_session[0] = '\0';
    if (!client)
        s_fail(self, 1, err);
    else if (self->args.router)
        rdzv_client_set_router(client, self->args.router);   /* checked at start */
    return client;
}

/* A shrink dropped this rank while the group's router may list it: its
 * engine goes on answering what the router still sends it until rdzvd's
 * status shows the router let it go, or --drain-timeout (the heartbeats
 * meanwhile keep it "alive", so the router drains it instead of cutting). */
static void s_leave(rdzv_agent_control_t *self, rdzv_client_t *client, int64_t epoch)
{
    const char *group = self->args.join.group;
    int rank = self->args.join.rank;
    int64_t deadline = s_now_ms() + self->args.drain_timeout_ms;
    for (bool first = true;; first = false) {
        char *json = NULL;
        bool listed = rdzv_status(client, group, &json) == RDZV_OK
                      && s_leaving(json, group, rank);
        free(json);
        pthread_mutex_lock(&self->lock);
        bool late = s_now_ms() >= deadline || self->stop;
        pthread_mutex_unlock(&self->lock);
        if (!listed && first)
            return;                  /* deleted, taken over, or never routed */
        if (first)
            fprintf(stderr, "rdzv agent: group %s rank %d left the group; its engine serves "
                    "until the router lets it go\n", group, rank);
        if (!listed || late) {
            fprintf(stderr, "rdzv agent: group %s rank %d: %s\n", group, rank,
                    !listed ? "the router let this rank go" : "the router still lists this "
                    "rank; going on");
            return;
        }
        int64_t now = epoch;
        rdzv_heartbeat_serving(client, group, rank, epoch, 0, &now);
        struct timespec pause = { .tv_nsec = 500 * 1000000L };
        nanosleep(&pause, NULL);
    }
}

/* rdzvd no longer knows this rank's session: the group was deleted (its
 * ports may already be another group's) or another session took the rank.
 * Serving on would put two engines on one port: fail as refused. */
static void s_lost(rdzv_agent_control_t *self, const char *why)
{
    char text[256];
    snprintf(text, sizeof text, "rdzvd no longer knows group %s rank %d (%.160s); "
             "releasing its ports", self->args.join.group, self->args.join.rank, why);
    s_fail(self, RDZV_AGENT_EXIT_REFUSED, text);
}

static void *s_run(void *arg)
{
    rdzv_agent_control_t *self = arg;
    rdzv_client_t *client = s_new_client(self);
    int64_t epoch = client ? s_join(self, client, true) : -1;
    while (epoch >= 0 && s_wait(self, self->args.heartbeat_ms)) {
        if (s_take_rejoin(self)) {
            rdzv_client_destroy(&client);
            if (!(client = s_new_client(self)))
                break;
            epoch = s_join(self, client, false);
            continue;
        }
        pthread_mutex_lock(&self->lock);
        bool drain = self->draining && !self->drained;
        pthread_mutex_unlock(&self->lock);
        if (drain) {
            s_drain(self, client, epoch);
            continue;
        }
        int64_t now = epoch;
        int rc = rdzv_heartbeat_serving(client, self->args.join.group, self->args.join.rank,
                                        epoch, s_serving(self), &now);
        const char *code = rc == RDZV_ERR_REFUSED ? rdzv_client_error_code(client) : "";
        if (strcmp(code, "stale_epoch") == 0) {
            fprintf(stderr, "rdzv agent: the group left epoch %lld; joining again\n",
                    (long long) epoch);
            epoch = s_join(self, client, false);
        } else if (strcmp(code, "not_found") == 0) {
            char why[256];
            snprintf(why, sizeof why, "%s", rdzv_client_error(client));
            if (self->args.router)
                s_leave(self, client, epoch);
            s_lost(self, why);
            break;
        } else if (rc != RDZV_OK) {
            fprintf(stderr, "rdzv agent: heartbeat: %s\n", rdzv_client_error(client));
        }
    }
    rdzv_client_destroy(&client);
    return NULL;
}

rdzv_agent_control_t *rdzv_agent_control_new(const rdzv_agent_control_args_t *args,
                                             char *err, size_t errlen)
{
    rdzv_agent_control_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->args = *args;
    self->args.first_session = NULL;
    if (args->first_session)
        snprintf(self->first_session, sizeof self->first_session, "%s", args->first_session);
    self->busy = true;
    self->serving = -1;
    self->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&self->lock, NULL);
    if (self->event_fd < 0 || pthread_create(&self->thread, NULL, s_run, self) != 0) {
        snprintf(err, errlen, "cannot start the rdzvd thread: %s", strerror(errno));
        if (self->event_fd >= 0)
            close(self->event_fd);
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self);
        return NULL;
    }
    return self;
}

/* A controller whose thread outlives it (rdzv_agent_control_destroy). */
static rdzv_agent_control_t *volatile s_still_running;

void rdzv_agent_control_destroy(rdzv_agent_control_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_agent_control_t *self = *self_p;
    *self_p = NULL;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    bool busy = self->busy;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    if (busy) {
        /* Blocked in a request to rdzvd: the process exit ends it. The
         * thread still uses self until then; a pointer kept here says so
         * (and keeps a leak checker from reporting it). */
        s_still_running = self;
        pthread_detach(self->thread);
        return;
    }
    pthread_join(self->thread, NULL);
    rdzv_assignment_destroy(&self->fresh);
    close(self->event_fd);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
}

int rdzv_agent_control_fd(const rdzv_agent_control_t *self)
{
    return self->event_fd;
}

rdzv_assignment_t *rdzv_agent_control_take(rdzv_agent_control_t *self,
                                           int *exit_code, char *err, size_t errlen)
{
    uint64_t count;
    ssize_t rc = read(self->event_fd, &count, sizeof count);
    (void) rc;
    pthread_mutex_lock(&self->lock);
    rdzv_assignment_t *a = self->fresh;
    self->fresh = NULL;
    *exit_code = self->exit_code;
    if (self->exit_code)
        snprintf(err, errlen, "%s", self->error);
    pthread_mutex_unlock(&self->lock);
    return a;
}

void rdzv_agent_control_rejoin(rdzv_agent_control_t *self)
{
    pthread_mutex_lock(&self->lock);
    self->rejoin = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
}
