#include "syncer.h"
#include "log.h"
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rdzv_syncer {
    pthread_mutex_t lock;
    pthread_cond_t work;         /* the thread waits for requests */
    pthread_cond_t done;         /* waiters wait for durable */
    pthread_t thread;
    bool started, stopping, do_sync, in_flight;
    double in_flight_since;      /* s_now_s() when the sync in flight began */
    int fd;
    uint64_t requested;          /* sync everything below this */
    uint64_t durable;            /* everything below this is on disk */
    int (*sync_fn)(int fd);
    rdzv_histogram_t latency;
};

static double s_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void *s_thread(void *arg)
{
    rdzv_syncer_t *self = arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stopping) {
        if (self->requested <= self->durable) {
            pthread_cond_wait(&self->work, &self->lock);
            continue;
        }
        /* Everything written before this fdatasync starts is covered by it. */
        uint64_t target = self->requested;
        int fd = self->fd;
        int (*sync_fn)(int) = self->sync_fn;
        uint64_t bytes = target - self->durable;
        int64_t t_begin = rdzv_trace_ns();
        double t0 = s_now_s();
        self->in_flight = true;
        self->in_flight_since = t0;
        pthread_mutex_unlock(&self->lock);
        int rc = sync_fn(fd);
        int err = errno;
        double took = s_now_s() - t0;
        if (bytes >= 4096) {         /* a large release's records, not a join's */
            RDZV_TRACE("sync_begin", -1, t_begin, bytes);
            RDZV_TRACE("sync_end", -1, rdzv_trace_ns(), bytes);
        }
        pthread_mutex_lock(&self->lock);
        self->in_flight = false;
        if (rc < 0) {
            rdzv_core_log("fatal", "journal fdatasync failed (%s): what reached the disk is "
                          "unknown, so rdzvd stops here; restarted, it replays what the disk "
                          "holds", strerror(err));
            fflush(stderr);
            _exit(1);
        }
        if (target > self->durable)
            self->durable = target;
        rdzv_histogram_observe(&self->latency, took);
        pthread_cond_broadcast(&self->done);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

rdzv_syncer_t *rdzv_syncer_new(int fd, uint64_t durable, bool do_sync)
{
    rdzv_syncer_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->work, NULL);
    pthread_cond_init(&self->done, NULL);
    self->fd = fd;
    self->requested = self->durable = durable;
    self->do_sync = do_sync;
    self->sync_fn = fdatasync;
    return self;
}

void rdzv_syncer_destroy(rdzv_syncer_t **self_p)
{
    rdzv_syncer_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock(&self->lock);
    self->stopping = true;
    pthread_cond_signal(&self->work);
    pthread_mutex_unlock(&self->lock);
    if (self->started)
        pthread_join(self->thread, NULL);
    pthread_cond_destroy(&self->work);
    pthread_cond_destroy(&self->done);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}

/* Under the lock: asks for everything below upto. */
static void s_request(rdzv_syncer_t *self, uint64_t upto)
{
    if (!self->do_sync) {
        if (upto > self->durable)
            self->durable = self->requested = upto;
        return;
    }
    if (upto <= self->requested)
        return;
    self->requested = upto;
    if (!self->started) {
        /* Started on first use: rdzvd without --no-fsync always gets here,
         * tools that only read a journal never do. */
        if (pthread_create(&self->thread, NULL, s_thread, self) != 0) {
            rdzv_core_log("fatal", "cannot start the journal's sync thread");
            fflush(stderr);
            _exit(1);
        }
        self->started = true;
    }
    pthread_cond_signal(&self->work);
}

void rdzv_syncer_start(rdzv_syncer_t *self, uint64_t written)
{
    pthread_mutex_lock(&self->lock);
    s_request(self, written);
    pthread_mutex_unlock(&self->lock);
}

void rdzv_syncer_wait(rdzv_syncer_t *self, uint64_t upto)
{
    pthread_mutex_lock(&self->lock);
    s_request(self, upto);
    while (self->durable < upto)
        pthread_cond_wait(&self->done, &self->lock);
    pthread_mutex_unlock(&self->lock);
}

void rdzv_syncer_reset(rdzv_syncer_t *self, int fd, uint64_t durable)
{
    pthread_mutex_lock(&self->lock);
    /* A sync in flight works on the old fd, which the caller closes after. */
    while (self->in_flight)
        pthread_cond_wait(&self->done, &self->lock);
    self->fd = fd;
    if (durable > self->durable)
        self->durable = durable;
    if (self->durable > self->requested)
        self->requested = self->durable;
    pthread_cond_broadcast(&self->done);
    pthread_mutex_unlock(&self->lock);
}

double rdzv_syncer_busy_s(rdzv_syncer_t *self)
{
    pthread_mutex_lock(&self->lock);
    double busy = self->in_flight ? s_now_s() - self->in_flight_since : 0;
    pthread_mutex_unlock(&self->lock);
    return busy;
}

void rdzv_syncer_latency(rdzv_syncer_t *self, rdzv_histogram_t *out)
{
    pthread_mutex_lock(&self->lock);
    *out = self->latency;
    pthread_mutex_unlock(&self->lock);
}

void rdzv_syncer_set_sync_fn(rdzv_syncer_t *self, int (*fn)(int fd))
{
    pthread_mutex_lock(&self->lock);
    self->sync_fn = fn ? fn : fdatasync;
    pthread_mutex_unlock(&self->lock);
}
