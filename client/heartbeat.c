/* A background heartbeat for a rank that holds an assignment: its own
 * thread and its own client (same session), so the caller's client stays
 * single-threaded. It tells rdzvd the rank is alive and notices when the
 * group moves to a newer epoch. */
#include "rdzv.h"
#include "rdzv_private.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_DEFAULT_INTERVAL_MS 5000
/* A heartbeat's request waits at most its interval, and never longer than
 * this, so that rdzv_heartbeat_stop returns promptly with rdzvd away. */
#define S_MAX_REQUEST_MS 2000

struct rdzv_heartbeat {
    rdzv_client_t *client;
    char *group;
    int rank;
    int64_t epoch;
    int interval_ms;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stopping;
    _Atomic bool stale;
    _Atomic uint64_t beats;
};

/* The assignment no longer holds: the group moved past its epoch, or rdzvd
 * no longer knows the rank's session (the group was deleted, or another
 * session took the rank). */
static bool s_gone(const char *code)
{
    return strcmp(code, "stale_epoch") == 0 || strcmp(code, "not_found") == 0;
}

static void *s_run(void *arg)
{
    rdzv_heartbeat_t *self = arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stopping) {
        pthread_mutex_unlock(&self->lock);
        int64_t seen = 0;
        int rc = rdzv_heartbeat(self->client, self->group, self->rank, self->epoch, &seen);
        if (rc == RDZV_OK)
            atomic_fetch_add(&self->beats, 1);
        else if (rc == RDZV_ERR_REFUSED && s_gone(rdzv_client_error_code(self->client)))
            atomic_store(&self->stale, true);
        pthread_mutex_lock(&self->lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += self->interval_ms / 1000;
        until.tv_nsec += (long) (self->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!self->stopping
               && pthread_cond_timedwait(&self->wake, &self->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static int s_interval(int interval_ms)
{
    if (interval_ms > 0)
        return interval_ms;
    const char *env = getenv("RDZV_HEARTBEAT");
    int seconds = env ? atoi(env) : 0;
    return seconds > 0 ? seconds * 1000 : S_DEFAULT_INTERVAL_MS;
}

RDZV_EXPORT rdzv_heartbeat_t *rdzv_heartbeat_start(const char *endpoint, const char *session,
                                                  const rdzv_assignment_t *assignment,
                                                  int interval_ms, char *err, size_t errlen)
{
    if (!session || !assignment) {
        if (err && errlen)
            snprintf(err, errlen, "a session and an assignment are required");
        return NULL;
    }
    rdzv_heartbeat_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->group = strdup(rdzv_assignment_group(assignment));
    self->rank = rdzv_assignment_rank(assignment);
    self->epoch = rdzv_assignment_epoch(assignment);
    self->interval_ms = s_interval(interval_ms);
    self->client = rdzv_client_new(endpoint, session, err, errlen);
    if (self->client)
        rdzv_client_set_request_timeout(self->client, self->interval_ms < S_MAX_REQUEST_MS
                                                      ? self->interval_ms : S_MAX_REQUEST_MS);
    pthread_mutex_init(&self->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (!self->group || !self->client || pthread_create(&self->thread, NULL, s_run, self) != 0) {
        if (err && errlen && self->client)
            snprintf(err, errlen, "cannot start the heartbeat thread");
        rdzv_client_destroy(&self->client);
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self->group);
        free(self);
        return NULL;
    }
    return self;
}

RDZV_EXPORT void rdzv_heartbeat_stop(rdzv_heartbeat_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_heartbeat_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->stopping = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    rdzv_client_destroy(&self->client);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self->group);
    free(self);
    *self_p = NULL;
}

RDZV_EXPORT bool rdzv_heartbeat_stale(const rdzv_heartbeat_t *self)
{
    return atomic_load(&self->stale);
}

RDZV_EXPORT uint64_t rdzv_heartbeat_count(const rdzv_heartbeat_t *self)
{
    return atomic_load(&self->beats);
}
