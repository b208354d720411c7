/* Routers with a worker-management HTTP API: vLLM's router and SGLang's
 * router (docs/deployment.md, "Routing", says which versions):
 *   GET  /list_workers              {"urls": ["http://HOST:PORT", ...]}
 *   POST /add_worker?url=URL        the router checks the worker and adds it
 *   POST /remove_worker?url=URL
 * with "Authorization: Bearer TOKEN" when rdzvd has --router-token. These
 * routers have no drain: a rank that stops serving is removed at once.
 * The workers rdzvd removes are the group's: those whose URL is a rank's
 * API endpoint, and those it added itself (s->owned), so that workers the
 * operator added by hand stay. */
#include "driver.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RDZV_HAVE_CURL
#include <cjson/cJSON.h>
#include <curl/curl.h>

#define S_CONNECT_TIMEOUT_MS 1000
/* The router checks a worker's health before it answers an add. */
#define S_ADD_TIMEOUT_MS 10000
#define S_TIMEOUT_MS 3000
#define S_BODY_MAX (4 << 20)

typedef struct {
    char *text;
    size_t len;
    bool too_long;
} s_body_t;

static size_t s_write(char *ptr, size_t size, size_t n, void *arg)
{
    s_body_t *b = arg;
    size_t add = size * n;
    if (b->len + add > S_BODY_MAX) {
        b->too_long = true;
        return 0;
    }
    char *grown = realloc(b->text, b->len + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, ptr, add);
    b->text = grown;
    b->len += add;
    b->text[b->len] = '\0';
    return add;
}

/* One call: method POST or GET of base + path (+ "?url=" worker, escaped);
 * 0 with the body in *body (malloc'd, may be NULL) on a 2xx, else -1 with
 * why set from the transport error or the status. */
static int s_call(rdzv_router_sync_t *s, CURL *curl, bool post, const char *path,
                  const char *worker, int timeout_ms, char **body)
{
    char url[2 * RDZV_ROUTER_URL_MAX + 64];
    char *escaped = worker ? curl_easy_escape(curl, worker, 0) : NULL;
    snprintf(url, sizeof url, "%s%s%s%s", s->url->base, path, escaped ? "?url=" : "",
             escaped ? escaped : "");
    curl_free(escaped);
    s_body_t b = { 0 };
    struct curl_slist *headers = NULL;
    char auth[4200];
    if (s->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", s->token);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long) S_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long) timeout_ms);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    if (post) {
        curl_easy_setopt(curl, CURLOPT_POST, 1L);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
    }
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    int ret = 0;
    const char *what = path + 1;
    if (rc == CURLE_OPERATION_TIMEDOUT)
        ret = rdzv_router_fail(s, RDZV_ROUTER_ERR_TIMEOUT, "%s: no answer within %d ms", what,
                               timeout_ms);
    else if (rc != CURLE_OK && !b.too_long)
        ret = rdzv_router_fail(s, RDZV_ROUTER_ERR_UNREACHABLE, "%s: %s", what,
                               curl_easy_strerror(rc));
    else if (b.too_long)
        ret = rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "%s: an answer over %d bytes", what,
                               S_BODY_MAX);
    else if (status < 200 || status > 299)
        ret = rdzv_router_fail(s, status == 401 || status == 403 ? RDZV_ROUTER_ERR_UNAUTHORIZED
                               : status == 404 ? RDZV_ROUTER_ERR_NOT_FOUND
                               : status >= 500 ? RDZV_ROUTER_ERR_SERVER
                               : RDZV_ROUTER_ERR_REFUSED,
                               "%s%s%s: HTTP %ld: %.120s", what, worker ? " " : "",
                               worker ? worker : "", status, b.text ? b.text : "");
    if (ret == 0 && body)
        *body = b.text;
    else
        free(b.text);
    return ret;
}

/* The router's workers: an array of URL strings (owned by *doc). */
static cJSON *s_list(rdzv_router_sync_t *s, CURL *curl, cJSON **doc)
{
    char *body = NULL;
    if (s_call(s, curl, false, "/list_workers", NULL, S_TIMEOUT_MS, &body) < 0)
        return NULL;
    *doc = body ? cJSON_Parse(body) : NULL;
    free(body);
    cJSON *urls = cJSON_GetObjectItemCaseSensitive(*doc, "urls");
    const cJSON *u;
    bool ok = cJSON_IsArray(urls);
    cJSON_ArrayForEach(u, urls)
        ok = ok && cJSON_IsString(u);
    if (!ok) {
        rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "list_workers: not {\"urls\": [...]}");
        return NULL;
    }
    return urls;
}

static bool s_listed(const cJSON *urls, const char *url)
{
    const cJSON *u;
    cJSON_ArrayForEach(u, urls)
        if (strcmp(u->valuestring, url) == 0)
            return true;
    return false;
}

static int s_owned_index(const rdzv_router_sync_t *s, const char *url)
{
    for (int i = 0; i < s->nowned; i++)
        if (strcmp(s->owned[i], url) == 0)
            return i;
    return -1;
}

static void s_own(rdzv_router_sync_t *s, const char *url)
{
    if (s_owned_index(s, url) >= 0)
        return;
    if (s->nowned == s->owned_cap) {
        int cap = s->owned_cap ? 2 * s->owned_cap : 16;
        char **grown = realloc(s->owned, (size_t) cap * sizeof *grown);
        if (!grown)
            return;
        s->owned = grown;
        s->owned_cap = cap;
    }
    char *copy = strdup(url);
    if (copy)
        s->owned[s->nowned++] = copy;
}

static void s_disown(rdzv_router_sync_t *s, const char *url)
{
    int i = s_owned_index(s, url);
    if (i >= 0) {
        free(s->owned[i]);
        s->owned[i] = s->owned[--s->nowned];
    }
}

/* The worker URL of member m. */
static void s_url(const rdzv_router_member_t *m, char *out, size_t len)
{
    snprintf(out, len, "http://%s", m->addr);
}

/* Whether url is one of the group's: a rank's endpoint, or one added for it. */
static bool s_ours(const rdzv_router_sync_t *s, const char *url)
{
    for (int i = 0; i < s->nmembers; i++) {
        char mine[RDZV_ROUTER_ADDR_MAX + 8];
        s_url(&s->members[i], mine, sizeof mine);
        if (strcmp(mine, url) == 0)
            return true;
    }
    return s_owned_index(s, url) >= 0;
}

/* Whether the last failure means the router is not there to talk to: the
 * rest of the pass would only wait out the same timeout again. */
static bool s_gone(const rdzv_router_sync_t *s)
{
    return s->why == RDZV_ROUTER_ERR_TIMEOUT || s->why == RDZV_ROUTER_ERR_UNREACHABLE;
}

static bool s_wanted(const rdzv_router_sync_t *s, const char *url)
{
    for (int i = 0; i < s->nmembers; i++) {
        char mine[RDZV_ROUTER_ADDR_MAX + 8];
        s_url(&s->members[i], mine, sizeof mine);
        if ((s->members[i].want || s->members[i].keep) && strcmp(mine, url) == 0)
            return true;
    }
    return false;
}

/* registered and draining: the members' URLs the router lists now, ready
 * if wanted (or kept), else on their way out (a removal that failed). */
static void s_report(rdzv_router_sync_t *s, const cJSON *urls)
{
    s->known = true;
    s->nregistered = s->ndraining = 0;
    for (int i = 0; i < s->nmembers; i++) {
        const rdzv_router_member_t *m = &s->members[i];
        char mine[RDZV_ROUTER_ADDR_MAX + 8];
        s_url(m, mine, sizeof mine);
        if (!s_listed(urls, mine))
            continue;
        if (m->want || m->keep)
            s->registered[s->nregistered++] = m->rank;
        else
            s->draining[s->ndraining++] = m->rank;
    }
}

int rdzv_router_http_sync(rdzv_router_sync_t *s)
{
    CURL *curl = curl_easy_init();
    if (!curl)
        return rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "cannot start libcurl");
    cJSON *doc = NULL;
    cJSON *urls = s_list(s, curl, &doc);
    int rc = urls ? 0 : -1;
    /* Off first: a rank's old endpoint leaves before its new one comes. A
     * rank rdzvd has no word on yet (keep) stays as the router has it. The
     * list is kept up to date as calls go through: it is what s_report
     * says the router holds. */
    for (cJSON *u = urls ? urls->child : NULL, *next; u && !(rc < 0 && s_gone(s)); u = next) {
        next = u->next;
        if (s_wanted(s, u->valuestring) || !s_ours(s, u->valuestring))
            continue;
        if (s_call(s, curl, true, "/remove_worker", u->valuestring, S_TIMEOUT_MS, NULL) < 0) {
            rc = -1;
            continue;
        }
        s_disown(s, u->valuestring);
        cJSON_Delete(cJSON_DetachItemViaPointer(urls, u));
    }
    for (int i = 0; urls && i < s->nmembers && !(rc < 0 && s_gone(s)); i++) {
        const rdzv_router_member_t *m = &s->members[i];
        char mine[RDZV_ROUTER_ADDR_MAX + 8];
        s_url(m, mine, sizeof mine);
        if (!m->want || s_listed(urls, mine))
            continue;
        if (s_call(s, curl, true, "/add_worker", mine, S_ADD_TIMEOUT_MS, NULL) < 0) {
            rc = -1;
            continue;
        }
        s_own(s, mine);
        cJSON_AddItemToArray(urls, cJSON_CreateString(mine));
    }
    if (urls)
        s_report(s, urls);
    cJSON_Delete(doc);
    curl_easy_cleanup(curl);
    return rc;
}

#else

int rdzv_router_http_sync(rdzv_router_sync_t *s)
{
    return rdzv_router_fail(s, RDZV_ROUTER_ERR_UNREACHABLE, "this rdzvd was built without "
                            "libcurl, so it cannot call HTTP routers (HAProxy works)");
}

#endif
