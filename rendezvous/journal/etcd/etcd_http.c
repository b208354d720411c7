/* etcd's JSON gateway over libcurl (etcd_http.h). */
#include "etcd_http.h"

#include <czmq.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ENDPOINTS 16
/* A member that does not take the connection within this is skipped. */
#define S_CONNECT_MS 500L
/* An answer larger than this is not etcd's (its requests stop at 1.5 MiB;
 * a range of them at a few times that). */
#define S_MAX_ANSWER (64u << 20)

struct rdzv_etcd {
    CURL *curl;
    struct curl_slist *headers;
    char *endpoint[S_MAX_ENDPOINTS];
    int count, current;
    char *ca, *cert, *key;
    bool stalled;                /* the last call: a member connected, then did not answer */
};

typedef struct {
    char *data;
    size_t len, cap;
    bool too_large;
    /* Streaming: each complete line goes to fn. */
    rdzv_etcd_stream_fn *fn;
    void *arg;
    int fn_rc;
    const atomic_bool *stop;
} s_answer_t;

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static void s_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static char *s_dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

rdzv_etcd_t *rdzv_etcd_new(const rdzv_etcd_config_t *cfg, char *err, size_t errlen)
{
    pthread_once(&s_once, s_global_init);
    rdzv_etcd_t *self = calloc(1, sizeof *self);
    char *list = self ? strdup(cfg->endpoints ? cfg->endpoints : "") : NULL;
    if (!list) {
        free(self);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char *save = NULL;
    for (char *ep = strtok_r(list, ",", &save); ep; ep = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(ep);
        while (n && ep[n - 1] == '/')
            ep[--n] = '\0';
        if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) {
            snprintf(err, errlen, "--etcd: '%s' is not http://HOST:PORT or https://HOST:PORT", ep);
            free(list);
            rdzv_etcd_destroy(&self);
            return NULL;
        }
        if (self->count == S_MAX_ENDPOINTS) {
            snprintf(err, errlen, "--etcd: more than %d endpoints", S_MAX_ENDPOINTS);
            free(list);
            rdzv_etcd_destroy(&self);
            return NULL;
        }
        self->endpoint[self->count++] = strdup(ep);
    }
    free(list);
    self->ca = s_dup(cfg->ca);
    self->cert = s_dup(cfg->cert);
    self->key = s_dup(cfg->key);
    self->curl = curl_easy_init();
    self->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!self->count || !self->curl || !self->headers) {
        snprintf(err, errlen, self->count ? "cannot set up libcurl" : "--etcd names no endpoint");
        rdzv_etcd_destroy(&self);
        return NULL;
    }
    return self;
}

void rdzv_etcd_destroy(rdzv_etcd_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_etcd_t *self = *self_p;
    if (self->curl)
        curl_easy_cleanup(self->curl);
    curl_slist_free_all(self->headers);
    for (int i = 0; i < self->count; i++)
        free(self->endpoint[i]);
    free(self->ca);
    free(self->cert);
    free(self->key);
    free(self);
    *self_p = NULL;
}

const char *rdzv_etcd_endpoint(const rdzv_etcd_t *self)
{
    return self->endpoint[self->current];
}

/* Hands each complete line of a stream to its function; keeps the rest. */
static void s_lines(s_answer_t *a)
{
    char *start = a->data, *nl;
    while (a->fn_rc == 0 && (nl = memchr(start, '\n', a->len - (size_t) (start - a->data)))) {
        *nl = '\0';
        cJSON *msg = nl > start ? cJSON_ParseWithLength(start, (size_t) (nl - start)) : NULL;
        if (msg)
            a->fn_rc = a->fn(a->arg, msg);
        cJSON_Delete(msg);
        start = nl + 1;
    }
    a->len -= (size_t) (start - a->data);
    memmove(a->data, start, a->len);
}

static size_t s_write(char *ptr, size_t size, size_t n, void *arg)
{
    s_answer_t *a = arg;
    size_t bytes = size * n;
    if (a->len + bytes + 1 > S_MAX_ANSWER) {
        a->too_large = true;
        return 0;
    }
    if (a->len + bytes + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + bytes + 1)
            cap *= 2;
        char *grown = realloc(a->data, cap);
        if (!grown)
            return 0;
        a->data = grown;
        a->cap = cap;
    }
    memcpy(a->data + a->len, ptr, bytes);
    a->len += bytes;
    a->data[a->len] = '\0';
    if (a->fn) {
        s_lines(a);
        if (a->fn_rc)
            return 0;               /* ends the transfer */
    }
    return bytes;
}

static int s_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void) dt, (void) dn, (void) ut, (void) un;
    s_answer_t *a = arg;
    return a->stop && atomic_load(a->stop) ? 1 : 0;
}

/* One POST to the current member. CURLE_OK and the HTTP status, or a curl
 * error. */
static CURLcode s_post(rdzv_etcd_t *self, const char *path, const char *body, long timeout_ms,
                       s_answer_t *a, long *status)
{
    char url[1024];
    snprintf(url, sizeof url, "%s%s", self->endpoint[self->current], path);
    CURL *c = self->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, self->headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, S_CONNECT_MS);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    /* Keep-alive probes notice a member that vanished under a long call. */
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 1L);
    if (a->stop) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    }
    if (self->ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, self->ca);
    if (self->cert)
        curl_easy_setopt(c, CURLOPT_SSLCERT, self->cert);
    if (self->key)
        curl_easy_setopt(c, CURLOPT_SSLKEY, self->key);
    CURLcode rc = curl_easy_perform(c);
    *status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    return rc;
}

/* The message of an error answer: {"error": "...", "message": "...", ...}. */
static void s_refusal(const char *text, long status, char *err, size_t errlen)
{
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    if (!cJSON_IsString(msg))
        msg = cJSON_GetObjectItemCaseSensitive(root, "error");
    snprintf(err, errlen, "etcd answered HTTP %ld: %s", status,
             cJSON_IsString(msg) ? msg->valuestring : text ? text : "");
    cJSON_Delete(root);
}

/* Tries each member once, from the current one, until one answers. */
static int s_call(rdzv_etcd_t *self, const char *path, const cJSON *body, long timeout_ms,
                  s_answer_t *a, char *err, size_t errlen)
{
    char *text = cJSON_PrintUnformatted(body);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return RDZV_ETCD_UNREACHABLE;
    }
    int rc = RDZV_ETCD_UNREACHABLE;
    self->stalled = false;
    for (int tried = 0; tried < self->count; tried++) {
        long status = 0;
        a->len = 0;
        a->too_large = false;
        CURLcode cc = s_post(self, path, text, timeout_ms, a, &status);
        bool stopped = a->stop && atomic_load(a->stop);
        if (a->fn && (a->fn_rc || stopped)) {
            rc = a->fn_rc;
            break;
        }
        if (cc == CURLE_OK && status == 200) {
            rc = RDZV_ETCD_OK;
            break;
        }
        if (cc == CURLE_OK) {
            /* An answer: another member would say the same. */
            s_refusal(a->data, status, err, errlen);
            rc = RDZV_ETCD_REFUSED;
            break;
        }
        curl_off_t connected_us = 0;
        curl_easy_getinfo(self->curl, CURLINFO_CONNECT_TIME_T, &connected_us);
        bool stalled = cc == CURLE_OPERATION_TIMEDOUT && connected_us > 0;
        /* A member that took the call and said nothing tells more than
         * those that refused the connection after it. */
        if (stalled || !self->stalled)
            snprintf(err, errlen, "%s%s: %s%s", self->endpoint[self->current], path,
                     a->too_large ? "answer too large" : curl_easy_strerror(cc),
                     stalled ? " (connected, no answer)" : "");
        self->stalled = self->stalled || stalled;
        self->current = (self->current + 1) % self->count;
        /* A stream's caller resumes from what it has seen, on the next. */
        if (stopped || a->fn)
            break;
    }
    free(text);
    return rc;
}

int rdzv_etcd_call(rdzv_etcd_t *self, const char *path, const cJSON *body, long timeout_ms,
                   cJSON **reply, char *err, size_t errlen)
{
    s_answer_t a = { 0 };
    *reply = NULL;
    int rc = s_call(self, path, body, timeout_ms, &a, err, errlen);
    if (rc == RDZV_ETCD_OK && !(*reply = a.data ? cJSON_Parse(a.data) : NULL)) {
        snprintf(err, errlen, "%s%s: the answer is not JSON", rdzv_etcd_endpoint(self), path);
        rc = RDZV_ETCD_REFUSED;
    }
    free(a.data);
    return rc;
}

int rdzv_etcd_stream(rdzv_etcd_t *self, const char *path, const cJSON *body, long timeout_ms,
                     rdzv_etcd_stream_fn *fn, void *arg, const atomic_bool *stop,
                     char *err, size_t errlen)
{
    s_answer_t a = { .fn = fn, .arg = arg, .stop = stop };
    int rc = s_call(self, path, body, timeout_ms, &a, err, errlen);
    /* A one-object answer (a campaign's) may end without a newline. */
    cJSON *last = rc == RDZV_ETCD_OK && a.len ? cJSON_ParseWithLength(a.data, a.len) : NULL;
    if (last)
        rc = fn(arg, last);
    cJSON_Delete(last);
    free(a.data);
    return rc;
}

bool rdzv_etcd_transient(const rdzv_etcd_t *self, const char *err)
{
    /* What etcd 3.4 answers while it elects a leader or has no quorum. */
    static const char *const passing[] = {
        "leader changed", "no leader", "request timed out", "context deadline exceeded",
        "too many requests", "unhealthy cluster", "not capable",
    };
    if (self && self->stalled)
        return true;
    if (!err || !strstr(err, "etcd answered HTTP"))
        return false;
    for (size_t i = 0; i < sizeof passing / sizeof passing[0]; i++)
        if (strstr(err, passing[i]))
            return true;
    return false;
}

char *rdzv_etcd_b64(const void *data, size_t len)
{
    zarmour_t *armour = zarmour_new();
    if (!armour)
        return NULL;
    zarmour_set_mode(armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_line_breaks(armour, false);
    char *text = zarmour_encode(armour, data, len);
    zarmour_destroy(&armour);
    return text;
}

char *rdzv_etcd_unb64(const char *text, size_t *len_out)
{
    zarmour_t *armour = zarmour_new();
    zchunk_t *chunk = armour && text ? zarmour_decode(armour, text) : NULL;
    zarmour_destroy(&armour);
    if (!chunk)
        return NULL;
    /* zarmour ends what it decodes with a NUL of its own: the length is
     * the text's. */
    size_t t = strlen(text), pad = (t && text[t - 1] == '=') + (t > 1 && text[t - 2] == '=');
    size_t n = t / 4 * 3 - pad;
    if (n > zchunk_size(chunk))
        n = zchunk_size(chunk);
    char *out = malloc(n + 1);
    if (out) {
        memcpy(out, zchunk_data(chunk), n);
        out[n] = '\0';
        *len_out = n;
    }
    zchunk_destroy(&chunk);
    return out;
}

void rdzv_etcd_add_b64(cJSON *obj, const char *name, const char *text, size_t len)
{
    char *b = rdzv_etcd_b64(text, len);
    cJSON_AddStringToObject(obj, name, b ? b : "");
    free(b);
}

int64_t rdzv_etcd_int(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (cJSON_IsString(v))
        return strtoll(v->valuestring, NULL, 10);
    return cJSON_IsNumber(v) ? (int64_t) v->valuedouble : 0;
}
