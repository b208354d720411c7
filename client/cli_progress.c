/* While a first join waits, a line on stderr every 5 s saying what it
 * waits for: how many ranks of the group joined and which are missing
 * (asked of rdzvd with status, on a connection of this thread's own), or
 * that rdzvd does not answer at all. A wait that says nothing looks the
 * same whether rdzvd is down, a Service is wrong, or rank 2's Pod is
 * unscheduled. */
#include "cli.h"

#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_EVERY_MS 5000
#define S_ASK_MS 2000

struct cli_progress {
    const char *cmd;
    char *server, *group;
    int timeout_ms;
    int64_t start_ms;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    bool asking;                /* the thread asks rdzvd, unlocked */
    bool left;                  /* stopped while asking: the thread frees p */
};

/* "group llm: 3 of 4 ranks joined epoch 1, waiting for ranks 2, 3 and 5 more" */
static void s_describe(const cJSON *g, const char *group, char *out, size_t len)
{
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(g, "world");
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive(g, "epoch");
    const cJSON *joined = cJSON_GetObjectItemCaseSensitive(g, "joined");
    const cJSON *missing = cJSON_GetObjectItemCaseSensitive(g, "missing");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(g, "missing_count");
    int n_missing = cJSON_IsNumber(count) ? count->valueint : 0, named = 0;
    int n = snprintf(out, len, "group %s: %d of %d ranks joined epoch %d", group,
                     cJSON_GetArraySize(joined), cJSON_IsNumber(world) ? world->valueint : 0,
                     cJSON_IsNumber(epoch) ? epoch->valueint : 0);
    if (n_missing <= 0 || n < 0 || (size_t) n >= len) {
        if (n >= 0 && (size_t) n < len)
            snprintf(out + n, len - (size_t) n, ", waiting for the reply");
        return;
    }
    n += snprintf(out + n, len - (size_t) n, ", waiting for rank%s", n_missing > 1 ? "s" : "");
    for (const cJSON *r = cJSON_IsArray(missing) ? missing->child : NULL;
         r && named < 8 && (size_t) n < len; r = r->next, named++)
        n += snprintf(out + n, len - (size_t) n, "%s %d", named ? "," : "", r->valueint);
    if (n_missing > named && (size_t) n < len)
        snprintf(out + n, len - (size_t) n, " and %d more", n_missing - named);
}

/* What to say about the wait, asking rdzvd (up to S_ASK_MS) into line. */
static void s_ask(struct cli_progress *p, rdzv_client_t **client, char *line, size_t len)
{
    char err[256];
    if (!*client && !(*client = rdzv_client_new(p->server, NULL, err, sizeof err))) {
        snprintf(line, len, "%s", err);
        return;
    }
    /* Not past the join's own timeout: the answer would come after it. */
    int64_t left = p->start_ms + p->timeout_ms - rdzv_now_ms();
    rdzv_client_set_request_timeout(*client, left > 0 && left < S_ASK_MS ? (int) left : S_ASK_MS);
    char *json = NULL;
    int rc = rdzv_status(*client, p->group, &json);
    const char *why = rdzv_client_error(*client);
    if (rc == RDZV_OK) {
        cJSON *groups = cJSON_Parse(json);
        const cJSON *g = cJSON_IsArray(groups) ? groups->child : NULL;
        if (g)
            s_describe(g, p->group, line, len);
        else
            snprintf(line, len, "group %s: not known to rdzvd yet", p->group);
        cJSON_Delete(groups);
    } else {
        /* librdzv's own reason: for no reply, the causes to check in the
         * same words as the join's final error (rdzv_no_reply_why). */
        snprintf(line, len, "%s", why);
        /* A new client after an I/O error; kept after a timeout, as it
         * knows which server of a list to ask next. */
        if (rc == RDZV_ERR_IO)
            rdzv_client_destroy(client);
    }
    free(json);
}

static void s_free(struct cli_progress *p)
{
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p->server);
    free(p->group);
    free(p);
}

/* Asks, and says it unless the wait ended meanwhile; false when the
 * thread was left to end by itself (p is then freed). Called locked. */
static bool s_report(struct cli_progress *p, rdzv_client_t **client)
{
    char line[768];             /* a no-reply reason (up to 512) and more */
    int64_t asked_ms = rdzv_now_ms();
    p->asking = true;
    pthread_mutex_unlock(&p->lock);
    s_ask(p, client, line, sizeof line);
    pthread_mutex_lock(&p->lock);
    p->asking = false;
    if (p->left) {
        pthread_mutex_unlock(&p->lock);
        rdzv_client_destroy(client);
        s_free(p);
        return false;
    }
    if (!p->stop)
        fprintf(stderr, "rdzv %s: still waiting after %lld s: %s; timeout %g s\n", p->cmd,
                (long long) ((asked_ms - p->start_ms) / 1000), line,
                p->timeout_ms / 1000.0);
    return true;
}

static void *s_thread(void *arg)
{
    struct cli_progress *p = arg;
    rdzv_client_t *client = NULL;
    pthread_mutex_lock(&p->lock);
    for (int64_t next = p->start_ms + S_EVERY_MS; !p->stop; next += S_EVERY_MS) {
        struct timespec until = { .tv_sec = (time_t) (next / 1000),
                                  .tv_nsec = (long) (next % 1000) * 1000000 };
        while (!p->stop && pthread_cond_timedwait(&p->wake, &p->lock, &until) == 0)
            ;
        if (!p->stop && !s_report(p, &client))
            return NULL;
    }
    pthread_mutex_unlock(&p->lock);
    rdzv_client_destroy(&client);
    return NULL;
}

cli_progress_t *cli_progress_start(const char *cmd, const char *server, const char *group,
                                   int timeout_ms)
{
    struct cli_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cmd = cmd;
    p->server = strdup(server);
    p->group = strdup(group);
    p->timeout_ms = timeout_ms > 0 ? timeout_ms : RDZV_DEFAULT_TIMEOUT_MS;
    p->start_ms = rdzv_now_ms();
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&p->lock, NULL);
    if (!p->server || !p->group || pthread_create(&p->thread, NULL, s_thread, p) != 0) {
        free(p->server);
        free(p->group);
        free(p);
        return NULL;
    }
    return p;
}

void cli_progress_stop(cli_progress_t **p_p)
{
    struct cli_progress *p = p_p ? *p_p : NULL;
    if (!p)
        return;
    *p_p = NULL;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->wake);
    /* An ask under way may take S_ASK_MS, or a DNS lookup's time: the
     * thread is left to end by itself rather than holding up the command
     * past its own timeout. */
    p->left = p->asking;
    pthread_mutex_unlock(&p->lock);
    if (p->left) {
        pthread_detach(p->thread);
        return;
    }
    pthread_join(p->thread, NULL);
    s_free(p);
}
