/* The librdzv API: build each request, send it through the transport and
 * turn the reply into a result, an error code and a one-line reason. */
#include "rdzv.h"

#include "assignment.h"
#include "endpoints.h"
#include "rdzv_private.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"
#include "route.h"
#include "router_url.h"
#include "transport.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rdzv_client {
    rdzv_transport_t *transport;
    rdzv_endpoints_t servers;
    char *endpoint;              /* the servers, as messages name them */
    char session[RDZV_MAX_NAME + 1];
    char err[RDZV_ERR_LEN];
    char code[RDZV_CODE_LEN];
    int request_timeout_ms;
    bool replace;                /* joins take the rank from a live session */
    bool members;                /* joins ask for the members list */
    bool curve;                  /* CURVE keys configured: a silence may be theirs */
    char *router;                /* joins name it; NULL: none */
    /* rank0 mode: the IDs this process made for its next successful join of
     * r0_group; kept across failed joins so a retry sends the same ones. */
    char r0_group[RDZV_MAX_NAME + 1];
    int r0_count;
    char r0_ids[RDZV_MAX_NCCL_IDS][RDZV_NCCL_ID_HEX + 1];
};

static int s_fail(rdzv_client_t *self, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_fail(rdzv_client_t *self, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->err, sizeof self->err, fmt, ap);
    va_end(ap);
    return rc;
}

static int s_new_session(char *out)
{
    unsigned char raw[RDZV_SESSION_BYTES];
    if (rdzv_random_bytes(raw, sizeof raw) != 0)
        return -1;
    rdzv_hex_encode(raw, sizeof raw, out);
    return 0;
}

/* The servers as messages name them: the endpoint, or "any of A, B". */
static char *s_where(const rdzv_endpoints_t *servers)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fputs(servers->count > 1 ? "any of " : "", f);
    for (int i = 0; i < servers->count; i++)
        fprintf(f, "%s%s", i ? ", " : "", servers->endpoint[i]);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

RDZV_EXPORT rdzv_client_t *rdzv_client_new(const char *endpoint, const char *session,
                                           char *err, size_t errlen)
{
    if (!endpoint)
        endpoint = RDZV_DEFAULT_ENDPOINT;
    /* "host:port" and "host" too, as a user types them. */
    rdzv_endpoints_t servers;
    if (rdzv_endpoints_parse(endpoint, &servers, err, errlen) < 0)
        return NULL;
    if (session && !rdzv_text_valid(session)) {
        rdzv_set_error(err, errlen, "session must be 1..%d printable bytes", RDZV_MAX_NAME);
        errno = EINVAL;
        return NULL;
    }
    rdzv_client_t *self = calloc(1, sizeof *self);
    if (!self || !(self->endpoint = s_where(&servers))) {
        free(self);
        rdzv_set_error(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    self->servers = servers;
    self->request_timeout_ms = RDZV_REQUEST_TIMEOUT_MS;
    const char *members = getenv("RDZV_MEMBERS");
    self->members = members && strcmp(members, "1") == 0;
    /* As security.c decides it; a key it cannot load fails the new below. */
    const char *curve = getenv("RDZV_CURVE_SERVER_PUBLIC");
    self->curve = curve && *curve;
    if (session)
        strcpy(self->session, session);
    else if (s_new_session(self->session) != 0) {
        rdzv_set_error(err, errlen, "cannot draw a random session id");
        rdzv_client_destroy(&self);
        errno = EIO;
        return NULL;
    }
    self->transport = rdzv_transport_new(&servers, err, errlen);
    if (!self->transport) {
        int saved = errno;
        rdzv_client_destroy(&self);
        errno = saved;
    }
    return self;
}

RDZV_EXPORT void rdzv_client_destroy(rdzv_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_client_t *self = *self_p;
    rdzv_transport_destroy(&self->transport);
    free(self->router);
    free(self->endpoint);
    free(self);
    *self_p = NULL;
}

RDZV_EXPORT const char *rdzv_client_session(const rdzv_client_t *self)
{
    return self ? self->session : NULL;
}

RDZV_EXPORT const char *rdzv_client_error(const rdzv_client_t *self)
{
    return self ? self->err : "";
}

RDZV_EXPORT const char *rdzv_client_error_code(const rdzv_client_t *self)
{
    return self ? self->code : "";
}

RDZV_EXPORT int rdzv_client_set_replace(rdzv_client_t *self, bool replace)
{
    if (!self)
        return RDZV_ERR_USAGE;
    self->replace = replace;
    return RDZV_OK;
}

RDZV_EXPORT int rdzv_client_set_members(rdzv_client_t *self, bool members)
{
    if (!self)
        return RDZV_ERR_USAGE;
    self->members = members;
    return RDZV_OK;
}

RDZV_EXPORT int rdzv_client_set_router(rdzv_client_t *self, const char *router)
{
    if (!self)
        return RDZV_ERR_USAGE;
    rdzv_router_url_t url;
    char why[400];
    if (router && rdzv_router_url_parse(router, &url, why, sizeof why) < 0)
        return s_fail(self, RDZV_ERR_USAGE, "%s", why);
    char *copy = router ? strdup(router) : NULL;
    if (router && !copy)
        return s_fail(self, RDZV_ERR_USAGE, "out of memory");
    free(self->router);
    self->router = copy;
    return RDZV_OK;
}

RDZV_EXPORT int rdzv_client_set_request_timeout(rdzv_client_t *self, int timeout_ms)
{
    if (!self || timeout_ms <= 0 || timeout_ms > RDZV_MAX_TIMEOUT_MS)
        return RDZV_ERR_USAGE;
    self->request_timeout_ms = timeout_ms;
    return RDZV_OK;
}

/* req, or NULL (and req freed) when building it failed. */
static cJSON *s_built(cJSON *req, bool ok)
{
    if (ok)
        return req;
    cJSON_Delete(req);
    return NULL;
}

/* A request envelope; NULL only when out of memory. */
static cJSON *s_request(rdzv_op_t op)
{
    cJSON *req = cJSON_CreateObject();
    return s_built(req, req && cJSON_AddNumberToObject(req, "v", RDZV_PROTO_VERSION)
                            && cJSON_AddStringToObject(req, "op", rdzv_op_name(op)));
}

/* A request envelope with "group", and "epoch" when epoch >= 0. */
static cJSON *s_scoped(rdzv_op_t op, const char *group, int64_t epoch)
{
    cJSON *req = s_request(op);
    return s_built(req, req && cJSON_AddStringToObject(req, "group", group)
                            && (epoch < 0
                                || cJSON_AddNumberToObject(req, "epoch", (double) epoch)));
}

/* A server's message as it is shown: whole up to S_MESSAGE_SHOWN bytes,
 * else cut at a character's start, with "…" and its length, so that a
 * broken or hostile server cannot flood a terminal or a log. */
#define S_MESSAGE_SHOWN 200

static void s_show_message(rdzv_client_t *self, const char *msg)
{
    size_t n = strlen(msg), cut = S_MESSAGE_SHOWN;
    if (n <= cut) {
        s_fail(self, 0, "%s", msg);
        return;
    }
    while (cut > 0 && ((unsigned char) msg[cut] & 0xC0) == 0x80)
        cut--;
    s_fail(self, 0, "%.*s… (%zu bytes)", (int) cut, msg, n);
}

/* Turns a reply's "error" object into RDZV_ERR_REFUSED (or TIMEOUT when the
 * server's own deadline passed), keeping code and message. */
static int s_refused(rdzv_client_t *self, const cJSON *error)
{
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(error, "message");
    if (!cJSON_IsString(code))
        return s_fail(self, RDZV_ERR_IO, "malformed error reply from the server");
    snprintf(self->code, sizeof self->code, "%s", code->valuestring);
    s_show_message(self, cJSON_IsString(msg) ? msg->valuestring : code->valuestring);
    return strcmp(code->valuestring, RDZV_E_TIMEOUT) == 0
           ? RDZV_ERR_TIMEOUT : RDZV_ERR_REFUSED;
}

void rdzv_no_reply_why(char *out, size_t len, const char *where, bool curve)
{
    /* CURVE first: after a key rotation it is the likeliest, and rdzvd's
     * zauth drops a client it does not know without a word, so only the
     * client can name it. A wrong group token is answered (forbidden),
     * so it is never a cause of silence and is not listed. */
    snprintf(out, len, "no reply from %s (%s; or rdzvd down, wrong address, "
             "Service/NetworkPolicy)", where,
             curve ? "RDZV_CURVE_SERVER_PUBLIC is not rdzvd's public key, "
                     "or this client's key is not in rdzvd's --clients"
                   : "no CURVE keys are set (RDZV_CURVE_SERVER_PUBLIC) "
                     "and rdzvd may require them");
}

/* Why a call ended at its deadline unanswered: the names that did not
 * resolve, and for a list also that none of it answered, with the causes
 * to check (rdzv_no_reply_why). Every call says the same, so that an
 * agent's heartbeat after a key rotation is as clear as a first join. */
static int s_no_reply(rdzv_client_t *self)
{
    const char *dns = rdzv_transport_unresolved(self->transport);
    if (*dns && self->servers.count == 1)
        return s_fail(self, RDZV_ERR_TIMEOUT, "%s", dns);
    char why[RDZV_ERR_LEN];
    rdzv_no_reply_why(why, sizeof why, self->endpoint, self->curve);
    return s_fail(self, RDZV_ERR_TIMEOUT, "%s%s%s", why, *dns ? "; " : "", dns);
}

/* Sends req (consumed; NULL means building it ran out of memory) and waits
 * until deadline_ms. On RDZV_OK *reply_out is the reply root, the caller's
 * to cJSON_Delete. */
static int s_call(rdzv_client_t *self, cJSON *req, int64_t deadline_ms,
                  cJSON **reply_out)
{
    *reply_out = NULL;
    if (!req)
        return s_fail(self, RDZV_ERR_IO, "out of memory");
    cJSON *reply = NULL;
    int rc = rdzv_transport_call(self->transport, req, deadline_ms, &reply,
                                 self->err, sizeof self->err);
    cJSON_Delete(req);
    if (rc == RDZV_ERR_TIMEOUT)
        return s_no_reply(self);
    if (rc != RDZV_OK)
        return rc;
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(reply, "error");
    if (cJSON_IsObject(error))
        rc = s_refused(self, error);
    else if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "ok")))
        rc = s_fail(self, RDZV_ERR_IO, "malformed reply from the server");
    if (rc != RDZV_OK)
        cJSON_Delete(reply);
    else
        *reply_out = reply;
    return rc;
}

/* s_call with the client's deadline, for requests that wait on nobody. */
static int s_call_short(rdzv_client_t *self, cJSON *req, cJSON **reply_out)
{
    return s_call(self, req, rdzv_now_ms() + self->request_timeout_ms, reply_out);
}

/* Resets the last error; every API call starts with it. */
static int s_begin(rdzv_client_t *self)
{
    if (!self)
        return RDZV_ERR_USAGE;
    self->err[0] = self->code[0] = '\0';
    return RDZV_OK;
}

static int s_check_name(rdzv_client_t *self, const char *what, const char *value)
{
    if (rdzv_name_valid(value))
        return RDZV_OK;
    return s_fail(self, RDZV_ERR_USAGE,
                  "%s must be 1..%d printable ASCII bytes without spaces",
                  what, RDZV_MAX_NAME);
}

RDZV_EXPORT int rdzv_heartbeat(rdzv_client_t *self, const char *group, int rank,
                               int64_t epoch, int64_t *epoch_out)
{
    return rdzv_heartbeat_serving(self, group, rank, epoch, -1, epoch_out);
}

/* Sends req (consumed) and reads the "epoch" of its reply into *epoch_out
 * (may be NULL); what names the request in the error. */
static int s_call_epoch(rdzv_client_t *self, cJSON *req, const char *what, int64_t *epoch_out)
{
    cJSON *reply;
    int rc = s_call_short(self, req, &reply);
    if (rc != RDZV_OK)
        return rc;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "epoch");
    if (!cJSON_IsNumber(e))
        rc = s_fail(self, RDZV_ERR_IO, "%s reply without an epoch", what);
    else if (epoch_out)
        *epoch_out = (int64_t) e->valuedouble;
    cJSON_Delete(reply);
    return rc;
}

RDZV_EXPORT int rdzv_heartbeat_serving(rdzv_client_t *self, const char *group, int rank,
                                       int64_t epoch, int serving, int64_t *epoch_out)
{
    int rc = s_begin(self);
    if (rc == RDZV_OK)
        rc = s_check_name(self, "group", group);
    if (rc != RDZV_OK)
        return rc;
    if (rank < 0 || epoch < 1)
        return s_fail(self, RDZV_ERR_USAGE, "rank must be >= 0 and epoch >= 1");
    cJSON *req = s_scoped(RDZV_OP_HEARTBEAT, group, epoch);
    req = s_built(req, req && cJSON_AddNumberToObject(req, "rank", rank)
                           && cJSON_AddStringToObject(req, "session", self->session)
                           && (serving < 0 || cJSON_AddBoolToObject(req, "serving", serving > 0)));
    return s_call_epoch(self, req, "heartbeat", epoch_out);
}

/* Copies the string field "value" of a kv reply (consumed) into *value_out. */
static int s_take_value(rdzv_client_t *self, cJSON *reply, char **value_out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(reply, "value");
    int rc = RDZV_OK;
    if (!cJSON_IsString(v))
        rc = s_fail(self, RDZV_ERR_IO, "kv reply without a string value");
    else if (!(*value_out = strdup(v->valuestring)))
        rc = s_fail(self, RDZV_ERR_IO, "out of memory");
    cJSON_Delete(reply);
    return rc;
}

static int s_check_kv(rdzv_client_t *self, const char *group, int64_t epoch,
                      const char *key)
{
    int rc = s_begin(self);
    if (rc == RDZV_OK)
        rc = s_check_name(self, "group", group);
    if (rc == RDZV_OK)
        rc = s_check_name(self, "key", key);
    if (rc == RDZV_OK && epoch < 1)
        rc = s_fail(self, RDZV_ERR_USAGE, "epoch must be >= 1");
    return rc;
}

RDZV_EXPORT int rdzv_kv_put(rdzv_client_t *self, const char *group, int64_t epoch,
                            const char *key, const char *value)
{
    int rc = s_check_kv(self, group, epoch, key);
    if (rc != RDZV_OK)
        return rc;
    if (!value || strlen(value) > RDZV_MAX_VALUE)
        return s_fail(self, RDZV_ERR_USAGE, "value must be at most %d bytes",
                      RDZV_MAX_VALUE);
    if (!rdzv_utf8_valid(value, strlen(value)))
        return s_fail(self, RDZV_ERR_USAGE, "value must be UTF-8 text");
    cJSON *req = s_scoped(RDZV_OP_KV_PUT, group, epoch);
    req = s_built(req, req && cJSON_AddStringToObject(req, "key", key)
                           && cJSON_AddStringToObject(req, "value", value));
    cJSON *reply;
    rc = s_call_short(self, req, &reply);
    cJSON_Delete(reply);
    return rc;
}

RDZV_EXPORT int rdzv_kv_get(rdzv_client_t *self, const char *group, int64_t epoch,
                            const char *key, char **value_out)
{
    int rc = s_check_kv(self, group, epoch, key);
    if (rc != RDZV_OK)
        return rc;
    if (!value_out)
        return s_fail(self, RDZV_ERR_USAGE, "value_out is NULL");
    cJSON *req = s_scoped(RDZV_OP_KV_GET, group, epoch);
    req = s_built(req, req && cJSON_AddStringToObject(req, "key", key));
    cJSON *reply;
    rc = s_call_short(self, req, &reply);
    return rc == RDZV_OK ? s_take_value(self, reply, value_out) : rc;
}

RDZV_EXPORT int rdzv_kv_wait(rdzv_client_t *self, const char *group, int64_t epoch,
                             const char *key, int timeout_ms, char **value_out)
{
    int rc = s_check_kv(self, group, epoch, key);
    if (rc != RDZV_OK)
        return rc;
    if (!value_out)
        return s_fail(self, RDZV_ERR_USAGE, "value_out is NULL");
    if (timeout_ms <= 0)
        timeout_ms = RDZV_DEFAULT_TIMEOUT_MS;
    if (timeout_ms > RDZV_MAX_TIMEOUT_MS)
        return s_fail(self, RDZV_ERR_USAGE, "timeout above %d ms", RDZV_MAX_TIMEOUT_MS);
    cJSON *req = s_scoped(RDZV_OP_KV_WAIT, group, epoch);
    req = s_built(req, req && cJSON_AddStringToObject(req, "key", key)
                           && cJSON_AddNumberToObject(req, "timeout_ms", timeout_ms));
    cJSON *reply;
    int64_t deadline = rdzv_now_ms() + timeout_ms + RDZV_WAIT_MARGIN_MS;
    rc = s_call(self, req, deadline, &reply);
    return rc == RDZV_OK ? s_take_value(self, reply, value_out) : rc;
}

RDZV_EXPORT int rdzv_status(rdzv_client_t *self, const char *group, char **json_out)
{
    int rc = s_begin(self);
    if (rc == RDZV_OK && group)
        rc = s_check_name(self, "group", group);
    if (rc != RDZV_OK)
        return rc;
    if (!json_out)
        return s_fail(self, RDZV_ERR_USAGE, "json_out is NULL");
    cJSON *req = group ? s_scoped(RDZV_OP_STATUS, group, -1) : s_request(RDZV_OP_STATUS);
    cJSON *reply;
    rc = s_call_short(self, req, &reply);
    if (rc != RDZV_OK)
        return rc;
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(reply, "groups");
    if (!cJSON_IsArray(groups))
        rc = s_fail(self, RDZV_ERR_IO, "status reply without a groups array");
    else if (!(*json_out = cJSON_PrintUnformatted(groups)))
        rc = s_fail(self, RDZV_ERR_IO, "out of memory");
    cJSON_Delete(reply);
    return rc;
}

RDZV_EXPORT int rdzv_group_delete(rdzv_client_t *self, const char *group)
{
    int rc = s_begin(self);
    if (rc == RDZV_OK)
        rc = s_check_name(self, "group", group);
    if (rc != RDZV_OK)
        return rc;
    cJSON *reply;
    rc = s_call_short(self, s_scoped(RDZV_OP_GROUP_DELETE, group, -1), &reply);
    cJSON_Delete(reply);
    return rc;
}

static int s_group_resize(rdzv_client_t *self, const char *group, int world, bool fresh,
                          int64_t *epoch_out)
{
    int rc = s_begin(self);
    if (rc == RDZV_OK)
        rc = s_check_name(self, "group", group);
    if (rc != RDZV_OK)
        return rc;
    if (world < 1)
        return s_fail(self, RDZV_ERR_USAGE, "world must be >= 1, not %d", world);
    cJSON *req = s_scoped(RDZV_OP_GROUP_RESIZE, group, -1);
    req = s_built(req, req && cJSON_AddNumberToObject(req, "world", world)
                            && (!fresh || cJSON_AddBoolToObject(req, "fresh", true)));
    return s_call_epoch(self, req, "group_resize", epoch_out);
}

RDZV_EXPORT int rdzv_group_resize(rdzv_client_t *self, const char *group, int world,
                                  int64_t *epoch_out)
{
    return s_group_resize(self, group, world, false, epoch_out);
}

RDZV_EXPORT int rdzv_group_resize_fresh(rdzv_client_t *self, const char *group, int world,
                                        int64_t *epoch_out)
{
    return s_group_resize(self, group, world, true, epoch_out);
}

/* Checks what the caller passed to rdzv_join; RDZV_ERR_USAGE names the field. */
static int s_check_join(rdzv_client_t *self, const rdzv_join_args_t *a)
{
    int rc = s_check_name(self, "group", a->group);
    if (rc != RDZV_OK)
        return rc;
    if (a->world < 1)
        return s_fail(self, RDZV_ERR_USAGE, "world must be >= 1, not %d", a->world);
    if (a->rank < 0 || a->rank >= a->world)
        return s_fail(self, RDZV_ERR_USAGE, "rank %d is outside world %d", a->rank, a->world);
    if ((a->host && !rdzv_text_valid(a->host)) || (a->node && !rdzv_text_valid(a->node)))
        return s_fail(self, RDZV_ERR_USAGE, "host and node must be 1..%d printable bytes",
                      RDZV_MAX_NAME);
    if (a->timeout_ms > RDZV_MAX_TIMEOUT_MS)
        return s_fail(self, RDZV_ERR_USAGE, "timeout above %d ms", RDZV_MAX_TIMEOUT_MS);
    return RDZV_OK;
}

/* The NCCL mode and ID count of a join: the arguments, else the variables
 * RDZV_NCCL_ID and RDZV_NCCL_IDS, else the server's default and 1. */
static int s_nccl_args(rdzv_client_t *self, const rdzv_join_args_t *a,
                       const char **mode_out, int *count_out)
{
    const char *mode = a->nccl_id;
    if (!mode && (mode = getenv("RDZV_NCCL_ID")) && !*mode)
        mode = NULL;
    if (mode && strcmp(mode, "server") != 0 && strcmp(mode, "none") != 0
        && strcmp(mode, "rank0") != 0)
        return s_fail(self, RDZV_ERR_USAGE,
                      "nccl_id must be \"server\", \"rank0\" or \"none\", not \"%s\"%s",
                      mode, a->nccl_id ? "" : " (from RDZV_NCCL_ID)");
    int count = a->nccl_ids;
    const char *env = getenv("RDZV_NCCL_IDS");
    if (count == 0 && env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (*end != '\0' || v < 1 || v > RDZV_MAX_NCCL_IDS)
            return s_fail(self, RDZV_ERR_USAGE, "RDZV_NCCL_IDS must be 1..%d, not \"%s\"",
                          RDZV_MAX_NCCL_IDS, env);
        count = (int) v;
    }
    if (count < 0 || count > RDZV_MAX_NCCL_IDS)
        return s_fail(self, RDZV_ERR_USAGE, "nccl_ids must be 1..%d (0: 1), not %d",
                      RDZV_MAX_NCCL_IDS, count);
    *mode_out = mode;
    *count_out = count;
    return RDZV_OK;
}

/* ncclGetUniqueId as librdzv sees it: no link-time dependency on NCCL. The
 * return value is ncclResult_t (0: ncclSuccess); the ID is 128 bytes. */
typedef int (*s_get_unique_id_fn)(void *id);
typedef const char *(*s_error_string_fn)(int result);

typedef union {
    void *obj;
    s_get_unique_id_fn get_id;
    s_error_string_fn error_string;
} s_nccl_sym_t;

/* Makes count IDs in this process (their bootstrap roots start here). The
 * library stays loaded for good: its root threads run inside it. */
static int s_make_rank0_ids(rdzv_client_t *self, const char *group, int count)
{
    const char *path = getenv("RDZV_NCCL_LIBRARY");
    if (!path || !*path)
        path = "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return s_fail(self, RDZV_ERR_IO, "nccl_id rank0: cannot load %s: %s", path, dlerror());
    s_nccl_sym_t get = { .obj = dlsym(lib, "ncclGetUniqueId") };
    s_nccl_sym_t str = { .obj = dlsym(lib, "ncclGetErrorString") };
    if (!get.obj)
        return s_fail(self, RDZV_ERR_IO, "nccl_id rank0: %s has no ncclGetUniqueId", path);
    self->r0_count = 0;
    for (int i = 0; i < count; i++) {
        unsigned char raw[RDZV_NCCL_ID_BYTES] = { 0 };
        int rc = get.get_id(raw);
        if (rc != 0)
            return s_fail(self, RDZV_ERR_IO, "nccl_id rank0: ncclGetUniqueId failed: %s (%d)",
                          str.obj ? str.error_string(rc) : "?", rc);
        rdzv_hex_encode(raw, sizeof raw, self->r0_ids[i]);
    }
    snprintf(self->r0_group, sizeof self->r0_group, "%s", group);
    self->r0_count = count;
    return RDZV_OK;
}

/* The IDs rank 0 sends: those of an earlier failed join of this group when
 * the count matches, else fresh ones. */
static int s_rank0_ids(rdzv_client_t *self, const char *group, int count)
{
    if (self->r0_count == count && strcmp(self->r0_group, group) == 0)
        return RDZV_OK;
    return s_make_rank0_ids(self, group, count);
}

static bool s_add_rank0_ids(const rdzv_client_t *self, cJSON *req)
{
    cJSON *ids = cJSON_AddArrayToObject(req, "nccl_unique_ids_from_rank0");
    if (!ids)
        return false;
    for (int i = 0; i < self->r0_count; i++) {
        cJSON *item = cJSON_CreateString(self->r0_ids[i]);
        if (!item || !cJSON_AddItemToArray(ids, item)) {
            cJSON_Delete(item);
            return false;
        }
    }
    return true;
}

/* The join request; host, node and the NCCL mode are already resolved.
 * rank0_ids: rank 0 of a rank0 group sends the IDs it made. NULL: no memory. */
static cJSON *s_join_request(const rdzv_client_t *self, const rdzv_join_args_t *a,
                             const char *host, const char *node, int timeout_ms,
                             const char *nccl_id, int nccl_ids, bool rank0_ids)
{
    cJSON *req = s_scoped(RDZV_OP_JOIN, a->group, -1);
    return s_built(req, req && cJSON_AddNumberToObject(req, "world", a->world)
                            && cJSON_AddNumberToObject(req, "rank", a->rank)
                            && cJSON_AddStringToObject(req, "host", host)
                            && cJSON_AddStringToObject(req, "node", node)
                            && cJSON_AddStringToObject(req, "session", self->session)
                            && cJSON_AddNumberToObject(req, "timeout_ms", timeout_ms)
                            && (!nccl_id
                                || cJSON_AddStringToObject(req, "nccl_id", nccl_id))
                            && (nccl_ids == 0
                                || cJSON_AddNumberToObject(req, "nccl_ids", nccl_ids))
                            && (!self->replace || cJSON_AddTrueToObject(req, "replace"))
                            && cJSON_AddBoolToObject(req, "members", self->members)
                            && (!self->router
                                || cJSON_AddStringToObject(req, "router", self->router))
                            && (!rank0_ids || s_add_rank0_ids(self, req)));
}

/* The reply's assignment, checked to be this rank's of this group. */
static int s_take_assignment(rdzv_client_t *self, const cJSON *reply,
                             const rdzv_join_args_t *a, rdzv_assignment_t **out)
{
    *out = rdzv_assignment_from_cjson(cJSON_GetObjectItemCaseSensitive(reply, "assignment"));
    if (!*out)
        return s_fail(self, RDZV_ERR_IO, "malformed assignment in the join reply");
    /* The world may differ from the one asked for: a rank that rejoins
     * after rdzv group resize gets the group's new one. */
    if (rdzv_assignment_rank(*out) != a->rank || rdzv_assignment_world(*out) <= a->rank
        || strcmp(rdzv_assignment_group(*out), a->group) != 0) {
        rdzv_assignment_destroy(out);
        return s_fail(self, RDZV_ERR_IO, "the join reply is for another rank or group");
    }
    return RDZV_OK;
}

/* The local address that routes to a server: the current one, else the
 * first of the list whose name resolves. 0, or -1 with the current
 * server's reason in self->err and errno EAGAIN when no name resolved. */
static int s_route_host(rdzv_client_t *self, char *host, size_t len)
{
    const char *current = rdzv_transport_endpoint(self->transport);
    if (rdzv_route_default_host(current, host, len, self->err, sizeof self->err) == 0)
        return 0;
    int saved = errno;
    for (int i = 0; saved == EAGAIN && i < self->servers.count; i++) {
        char why[RDZV_ERR_LEN];
        if (rdzv_route_default_host(self->servers.endpoint[i], host, len, why, sizeof why) == 0) {
            self->err[0] = '\0';
            return 0;
        }
    }
    errno = saved;
    return -1;
}

static void s_sleep_ms(int64_t ms)
{
    struct timespec left = { .tv_sec = (time_t) (ms / 1000),
                             .tv_nsec = (long) (ms % 1000) * 1000000 };
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* Adds the join's timeout to a timeout's reason, as the user gave it. */
static int s_timed_out(rdzv_client_t *self, int timeout_ms)
{
    char said[sizeof self->err];
    snprintf(said, sizeof said, "%s", self->err);
    return s_fail(self, RDZV_ERR_TIMEOUT, "%.*s; timeout %g s", (int) sizeof said - 32, said,
                  timeout_ms / 1000.0);
}

/* The host and node a join reports: the caller's, else the defaults. A
 * server name that does not resolve is looked up again until deadline_ms,
 * as libzmq does for the connection: a Service may not be there yet.
 * *waited_ms: how long those retries slept. */
static int s_whereabouts(rdzv_client_t *self, const rdzv_join_args_t *a, char *host,
                         char *node, int64_t deadline_ms, int timeout_ms, int64_t *waited_ms)
{
    *waited_ms = 0;
    if (!a->node && rdzv_route_default_node(node, RDZV_MAX_NAME + 1,
                                            self->err, sizeof self->err) != 0)
        return RDZV_ERR_IO;
    while (!a->host && s_route_host(self, host, RDZV_MAX_NAME + 1) != 0) {
        int64_t left = deadline_ms - rdzv_now_ms();
        if (errno != EAGAIN)
            return RDZV_ERR_IO;
        if (left <= 0)
            return s_timed_out(self, timeout_ms);
        int64_t pause = left < RDZV_RESOLVE_RETRY_MS ? left : RDZV_RESOLVE_RETRY_MS;
        s_sleep_ms(pause);
        *waited_ms += pause;
    }
    return RDZV_OK;
}

RDZV_EXPORT int rdzv_join(rdzv_client_t *self, const rdzv_join_args_t *args,
                          rdzv_assignment_t **out)
{
    int rc = s_begin(self);
    if (rc != RDZV_OK || !args || !out)
        return rc == RDZV_OK ? s_fail(self, RDZV_ERR_USAGE, "args or out is NULL") : rc;
    *out = NULL;
    const char *nccl_id = NULL;
    int nccl_ids = 0;
    if ((rc = s_check_join(self, args)) != RDZV_OK
        || (rc = s_nccl_args(self, args, &nccl_id, &nccl_ids)) != RDZV_OK)
        return rc;
    bool rank0_ids = nccl_id && strcmp(nccl_id, "rank0") == 0 && args->rank == 0;
    if (rank0_ids && (rc = s_rank0_ids(self, args->group, nccl_ids ? nccl_ids : 1)) != RDZV_OK)
        return rc;
    int timeout_ms = args->timeout_ms > 0 ? args->timeout_ms : RDZV_DEFAULT_TIMEOUT_MS;
    int64_t deadline_ms = rdzv_now_ms() + timeout_ms;
    char host[RDZV_MAX_NAME + 1], node[RDZV_MAX_NAME + 1];
    int64_t waited_ms;
    if ((rc = s_whereabouts(self, args, host, node, deadline_ms, timeout_ms, &waited_ms))
        != RDZV_OK)
        return rc;
    /* rdzvd waits what is left of the timeout after a name lookup's retries
     * (the user's own figure when there were none). */
    int64_t left = timeout_ms - waited_ms;
    cJSON *req = s_join_request(self, args, args->host ? args->host : host,
                                args->node ? args->node : node, left > 0 ? (int) left : 1,
                                nccl_id, nccl_ids, rank0_ids);
    cJSON *reply;
    /* The margin lets rdzvd's own timeout reply, which says how many ranks
     * joined, arrive before the client gives up. */
    rc = s_call(self, req, deadline_ms + RDZV_WAIT_MARGIN_MS, &reply);
    /* Said in the user's terms: the timeout they gave (s_call said what
     * to check). */
    if (rc == RDZV_ERR_TIMEOUT)
        return s_timed_out(self, timeout_ms);
    if (rc != RDZV_OK)
        return rc;
    rc = s_take_assignment(self, reply, args, out);
    cJSON_Delete(reply);
    if (rc == RDZV_OK && rank0_ids)
        self->r0_count = 0;     /* used up: the next join makes new roots */
    return rc;
}
