/* The reconcile loop (router.h): once per interval, every group that names
 * a router is driven towards its serving endpoints; a router that failed
 * is left alone for a back-off that doubles up to S_BACKOFF_MAX_MS. */
#include "router.h"
#include "driver.h"
#include "log.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BACKOFF_FIRST_MS 1000
#define S_BACKOFF_MAX_MS 30000

/* What the loop remembers of one group between passes. */
typedef struct {
    char *router;                /* the router driven last */
    int64_t next_ms;             /* no call before this (back-off) */
    int backoff_ms;
    char **owned;                /* rdzv_router_sync_t.owned */
    int nowned, owned_cap;
    bool seen;                   /* in this pass's list */
} s_group_t;

struct rdzv_router {
    rdzv_core_t *core;
    rdzv_router_opts_t opts;
    zhashx_t *groups;            /* name -> s_group_t */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

static void s_group_free(void **item)
{
    s_group_t *g = *item;
    if (!g)
        return;
    for (int i = 0; i < g->nowned; i++)
        free(g->owned[i]);
    free(g->owned);
    free(g->router);
    free(g);
    *item = NULL;
}

/* The members of a status object that have a plan, whatever the epoch: a
 * rank of a forming epoch still serves its engine's requests until its
 * health checks say otherwise (its engine restarts), and one that rejoined
 * is "keep" until its next heartbeat. A member whose host is no address a
 * router can be given (rdzv_router_host) is left out, which takes it off
 * the router: the host is a client's text. */
static int s_members(const cJSON *status, rdzv_router_member_t *out, int max, int *bad_host)
{
    int n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(status, "members")) {
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(m, "rank");
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(m, "host");
        const cJSON *ports = cJSON_GetObjectItemCaseSensitive(m, "ports");
        if (n >= max || !cJSON_IsNumber(rank) || !cJSON_IsString(host) || !cJSON_IsArray(ports)
            || !cJSON_IsNumber(ports->child))
            continue;
        rdzv_router_member_t *r = &out[n];
        if (rdzv_router_host(host->valuestring, r->host, sizeof r->host, &r->ip) < 0) {
            if (*bad_host < 0)
                *bad_host = rank->valueint;
            continue;
        }
        n++;
        r->rank = rank->valueint;
        r->port = ports->child->valueint + RDZV_ROLE_API;
        snprintf(r->addr, sizeof r->addr, strchr(r->host, ':') ? "[%s]:%d" : "%s:%d", r->host,
                 r->port);
        r->alive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "alive"));
        const cJSON *serving = cJSON_GetObjectItemCaseSensitive(m, "serving");
        r->want = r->alive && cJSON_IsTrue(serving);
        r->keep = r->alive && cJSON_IsNull(serving);
    }
    return n;
}

/* The ranks a shrink dropped that may still be listed (status "leaving"),
 * after the n members in out: never wanted, so drained while their agents
 * are heard from (their engines still answer) and removed after. */
static int s_leaving(const cJSON *status, rdzv_router_member_t *out, int n, int max)
{
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(status, "leaving")) {
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(l, "rank");
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(l, "host");
        const cJSON *port = cJSON_GetObjectItemCaseSensitive(l, "api_port");
        rdzv_router_member_t *r = &out[n];
        if (n >= max || !cJSON_IsNumber(rank) || !cJSON_IsString(host) || !cJSON_IsNumber(port)
            || rdzv_router_host(host->valuestring, r->host, sizeof r->host, &r->ip) < 0)
            continue;
        n++;
        r->rank = rank->valueint;
        r->port = port->valueint;
        snprintf(r->addr, sizeof r->addr, strchr(r->host, ':') ? "[%s]:%d" : "%s:%d", r->host,
                 r->port);
        r->alive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "alive"));
        r->want = r->keep = false;
    }
    return n;
}

/* One call of the driver for router url; what it found goes to the core
 * unless report is false (the old router of a group that moved). */
static int s_drive(rdzv_router_t *self, s_group_t *st, const char *group, const char *url,
                   const rdzv_router_member_t *members, int n, bool report, int bad_host)
{
    rdzv_router_url_t u;
    rdzv_router_sync_t s = {
        .group = group, .url = &u, .members = members, .nmembers = n,
        .owned = st->owned, .nowned = st->nowned, .owned_cap = st->owned_cap,
        .drain_s = self->opts.drain_s, .registered = calloc((size_t) n + 1, sizeof (int)),
        .draining = calloc((size_t) n + 1, sizeof (int)),
    };
    char *token = self->opts.token_file ? rdzv_read_token_file(self->opts.token_file) : NULL;
    s.token = token;
    int rc;
    if (!s.registered || !s.draining)
        rc = rdzv_router_fail(&s, RDZV_ROUTER_ERR_PROTOCOL, "out of memory");
    else if (rdzv_router_url_parse(url, &u, s.err, sizeof s.err) < 0)
        rc = rdzv_router_fail(&s, RDZV_ROUTER_ERR_REFUSED, "%s", s.err);
    else if (!rdzv_router_allowed(self->opts.allow, self->opts.nallow, url))
        rc = rdzv_router_fail(&s, RDZV_ROUTER_ERR_REFUSED, "no --router-allow of this rdzvd "
                              "names this router any more: it is left as it is");
    else if (self->opts.token_file && !token && u.kind == RDZV_ROUTER_HTTP)
        rc = rdzv_router_fail(&s, RDZV_ROUTER_ERR_UNAUTHORIZED, "cannot read the router token "
                              "file %s", self->opts.token_file);
    else
        rc = u.kind == RDZV_ROUTER_HAPROXY ? rdzv_router_haproxy_sync(&s)
                                           : rdzv_router_http_sync(&s);
    st->owned = s.owned, st->nowned = s.nowned, st->owned_cap = s.owned_cap;
    if (rc == 0 && bad_host >= 0)
        rc = rdzv_router_fail(&s, RDZV_ROUTER_ERR_REFUSED, "rank %d's host is neither an IP "
                              "address nor a DNS name: it is not registered", bad_host);
    if (rc < 0)
        rdzv_core_log("router_error", "group=%s router=%s reason=%s error=\"%s\"", group, url,
                      rdzv_router_err_names[s.why], s.err);
    if (report) {
        rdzv_router_report_t rep = {
            .group = group, .router = url, .known = s.known, .registered = s.registered,
            .nregistered = s.registered ? s.nregistered : 0,
            .draining = s.draining, .ndraining = s.draining ? s.ndraining : 0,
            .reason = rc < 0 ? (int) s.why : -1, .error = rc < 0 ? s.err : NULL,
        };
        rdzv_core_router_report(self->core, &rep);
    }
    free(token);
    free(s.registered);
    free(s.draining);
    return rc;
}

static void s_back_off(s_group_t *st, int64_t now_ms)
{
    st->backoff_ms = st->backoff_ms ? st->backoff_ms * 2 : S_BACKOFF_FIRST_MS;
    if (st->backoff_ms > S_BACKOFF_MAX_MS)
        st->backoff_ms = S_BACKOFF_MAX_MS;
    st->next_ms = now_ms + st->backoff_ms;
}

static s_group_t *s_state(rdzv_router_t *self, const char *name)
{
    s_group_t *st = zhashx_lookup(self->groups, name);
    if (!st && (st = calloc(1, sizeof *st)))
        zhashx_insert(self->groups, name, st);
    return st;
}

/* A group's pass: first the router it moved away from is emptied of it
 * (once, best effort), then its router is driven. */
static void s_pass_group(rdzv_router_t *self, const cJSON *status, int64_t now_ms)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(status, "group");
    const cJSON *router = cJSON_GetObjectItemCaseSensitive(status, "router");
    if (!cJSON_IsString(name) || !cJSON_IsString(router))
        return;
    s_group_t *st = s_state(self, name->valuestring);
    if (!st)
        return;
    st->seen = true;
    if (st->router && strcmp(st->router, router->valuestring) != 0) {
        s_drive(self, st, name->valuestring, st->router, NULL, 0, false, -1);
        for (int i = 0; i < st->nowned; i++)
            free(st->owned[i]);
        st->nowned = 0;
        free(st->router);
        st->router = NULL;
        st->next_ms = 0;
        st->backoff_ms = 0;
    }
    if (!st->router && !(st->router = strdup(router->valuestring)))
        return;
    if (now_ms < st->next_ms)
        return;
    int max = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(status, "members"))
              + cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(status, "leaving"));
    rdzv_router_member_t *members = calloc((size_t) max + 1, sizeof *members);
    if (!members)
        return;
    int bad_host = -1;
    int n = s_members(status, members, max, &bad_host);
    n = s_leaving(status, members, n, max);
    if (s_drive(self, st, name->valuestring, st->router, members, n, true, bad_host) == 0)
        st->backoff_ms = 0, st->next_ms = 0;
    else
        s_back_off(st, now_ms);
    free(members);
}

/* A group that is gone (deleted): its ranks leave the router it had. A
 * cleanup that fails is tried again, with the same back-off, until it
 * goes through. */
static void s_forget_unseen(rdzv_router_t *self, int64_t now_ms)
{
    zlist_t *gone = zlist_new();
    for (s_group_t *st = zhashx_first(self->groups); st; st = zhashx_next(self->groups)) {
        if (!st->seen && gone)
            zlist_append(gone, (void *) zhashx_cursor(self->groups));
        st->seen = false;
    }
    for (const char *name = gone ? zlist_first(gone) : NULL; name; name = zlist_next(gone)) {
        s_group_t *st = zhashx_lookup(self->groups, name);
        if (now_ms < st->next_ms)
            continue;
        if (st->router && s_drive(self, st, name, st->router, NULL, 0, false, -1) < 0)
            s_back_off(st, now_ms);
        else
            zhashx_delete(self->groups, name);
    }
    zlist_destroy(&gone);
}

static bool s_stopping(rdzv_router_t *self)
{
    pthread_mutex_lock(&self->lock);
    bool stop = self->stop;
    pthread_mutex_unlock(&self->lock);
    return stop;
}

static void s_pass(rdzv_router_t *self)
{
    int64_t now_ms = rdzv_now_ms();
    cJSON *groups = rdzv_core_routed_json(self->core, now_ms);
    if (!groups)
        return;
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        if (s_stopping(self)) {
            /* A pass cut short saw only some groups: the others are not
             * gone, and their routers are left as they are. */
            cJSON_Delete(groups);
            return;
        }
        s_pass_group(self, g, now_ms);
    }
    cJSON_Delete(groups);
    s_forget_unseen(self, now_ms);
}

static void *s_run(void *arg)
{
    rdzv_router_t *self = arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stop) {
        pthread_mutex_unlock(&self->lock);
        /* A standby's view is the leader's journal: the leader drives. */
        if (rdzv_core_leading(self->core))
            s_pass(self);
        pthread_mutex_lock(&self->lock);
        struct timespec until;
        rdzv_timespec_after(CLOCK_MONOTONIC, self->opts.interval_ms, &until);
        while (!self->stop && pthread_cond_timedwait(&self->wake, &self->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

rdzv_router_t *rdzv_router_start(rdzv_core_t *core, const rdzv_router_opts_t *opts, char *err,
                                 size_t errlen)
{
    rdzv_router_t *self = calloc(1, sizeof *self);
    if (!self || !(self->groups = zhashx_new())) {
        free(self);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    zhashx_set_destructor(self->groups, s_group_free);
    self->core = core;
    self->opts = *opts;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&self->lock, NULL);
    int rc = pthread_create(&self->thread, NULL, s_run, self);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the router thread: %s", strerror(rc));
        zhashx_destroy(&self->groups);
        free(self);
        return NULL;
    }
    return self;
}

void rdzv_router_stop(rdzv_router_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_router_t *self = *self_p;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    pthread_join(self->thread, NULL);
    zhashx_destroy(&self->groups);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    free(self);
    *self_p = NULL;
}
