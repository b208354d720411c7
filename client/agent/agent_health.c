#include "agent_health.h"
#include "agent_curl.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define S_MAX_WAIT_MS 2000

struct rdzv_agent_health {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;                   /* guarded by lock */
    char url[512];
    int interval_ms;
    rdzv_agent_health_fn *fn;
    void *arg;
    const rdzv_agent_curl_t *curl;
};

/* The body is not looked at: vLLM's /health answers an empty 200. */
static size_t s_discard(char *data, size_t size, size_t n, void *arg)
{
    (void) data;
    (void) arg;
    return size * n;
}

static int s_check(const rdzv_agent_curl_t *c, CURL *curl)
{
    long status = 0;
    return c->easy_perform(curl) == CURLE_OK
           && c->easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK
           && status == 200;
}

/* Waits interval_ms, or until stopped; false once stopped. */
static bool s_sleep(rdzv_agent_health_t *self)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += self->interval_ms / 1000;
    until.tv_nsec += (long) (self->interval_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&self->lock);
    while (!self->stop && pthread_cond_timedwait(&self->wake, &self->lock, &until) != ETIMEDOUT)
        ;
    bool go_on = !self->stop;
    pthread_mutex_unlock(&self->lock);
    return go_on;
}

static void *s_run(void *arg)
{
    rdzv_agent_health_t *self = arg;
    const rdzv_agent_curl_t *c = self->curl;
    CURL *curl = c->easy_init();
    long wait_ms = self->interval_ms < S_MAX_WAIT_MS ? self->interval_ms : S_MAX_WAIT_MS;
    if (curl) {
        c->easy_setopt(curl, CURLOPT_URL, self->url);
        c->easy_setopt(curl, CURLOPT_TIMEOUT_MS, wait_ms);
        c->easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, wait_ms);
        c->easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        c->easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_discard);
        /* Loopback only: a proxy from the environment must not answer for it. */
        c->easy_setopt(curl, CURLOPT_NOPROXY, "*");
    }
    do
        self->fn(self->arg, curl ? s_check(c, curl) : 0);
    while (s_sleep(self));
    if (curl)
        c->easy_cleanup(curl);
    return NULL;
}

rdzv_agent_health_t *rdzv_agent_health_start(int port, const char *path, int interval_ms,
                                             rdzv_agent_health_fn *fn, void *arg,
                                             char *err, size_t errlen)
{
    const rdzv_agent_curl_t *curl = rdzv_agent_curl(err, errlen);
    if (!curl)
        return NULL;
    rdzv_agent_health_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(self->url, sizeof self->url, "http://127.0.0.1:%d%s", port, path);
    self->interval_ms = interval_ms;
    self->fn = fn;
    self->arg = arg;
    self->curl = curl;
    pthread_mutex_init(&self->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&self->thread, NULL, s_run, self) != 0) {
        snprintf(err, errlen, "cannot start the health check thread");
        pthread_cond_destroy(&self->wake);
        pthread_mutex_destroy(&self->lock);
        free(self);
        return NULL;
    }
    return self;
}

void rdzv_agent_health_stop(rdzv_agent_health_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_agent_health_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}
