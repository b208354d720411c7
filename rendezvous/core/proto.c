#include "proto.h"
#include "proto_json.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"
#include "router_url.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much of a refused value an error message echoes. */
#define S_ECHO_MAX 64
#define S_KEYS_ON_STACK 32

/* Field fetchers: each returns 0, or -1 with *code and msg set. */
typedef struct {
    const cJSON *root;
    const char **code;
    char *msg;
    size_t msglen;
} s_ctx_t;

static int s_fail(s_ctx_t *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_fail(s_ctx_t *c, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    *c->code = code;
    vsnprintf(c->msg, c->msglen, fmt, ap);
    va_end(ap);
    return -1;
}

static int s_string(s_ctx_t *c, const char *name, bool required, bool strict_name,
                    const char **out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(c->root, name);
    if (!item) {
        *out = NULL;
        return required ? s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" is required", name) : 0;
    }
    if (!cJSON_IsString(item))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a string", name);
    const char *s = item->valuestring;
    if (strict_name ? !rdzv_name_valid(s) : !rdzv_text_valid(s))
        return s_fail(c, RDZV_E_BAD_REQUEST,
                      "field \"%s\" must be 1..255 printable characters", name);
    *out = s;
    return 0;
}

/* Integers arrive as JSON numbers (doubles); refuse fractions and values
 * outside [lo, hi] so nothing downstream sees a truncated number. */
static int s_int(s_ctx_t *c, const char *name, bool required, double lo, double hi,
                 const char *range_code, int64_t *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(c->root, name);
    if (!item) {
        if (required)
            return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" is required", name);
        return 0;
    }
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)
        || item->valuedouble != floor(item->valuedouble))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be an integer", name);
    if (item->valuedouble < lo || item->valuedouble > hi)
        return s_fail(c, range_code, "field \"%s\" is out of range", name);
    *out = (int64_t) item->valuedouble;
    return 0;
}

/* rank0 mode: rank 0 brings the IDs its own process made. */
static int s_hex_ids(s_ctx_t *c, rdzv_request_t *r)
{
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(c->root, "nccl_unique_ids_from_rank0");
    if (!ids)
        return 0;
    int n = cJSON_GetArraySize(ids);
    if (!cJSON_IsArray(ids) || n < 1 || n > RDZV_MAX_NCCL_IDS)
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be an array of 1..16 IDs",
                      "nccl_unique_ids_from_rank0");
    const cJSON *id;
    unsigned char raw[RDZV_NCCL_ID_BYTES];
    cJSON_ArrayForEach(id, ids)
        if (!cJSON_IsString(id) || rdzv_hex_decode(id->valuestring, raw, sizeof raw) < 0)
            return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" holds an ID that is not 256 hex characters",
                          "nccl_unique_ids_from_rank0");
    r->rank0_ids = ids;
    return 0;
}

/* A join's optional router: a URL rdzv_router_url_parse takes. */
static int s_router(s_ctx_t *c, rdzv_request_t *r)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(c->root, "router");
    if (!item)
        return 0;
    if (!cJSON_IsString(item))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a string", "router");
    rdzv_router_url_t url;
    char why[300];
    if (rdzv_router_url_parse(item->valuestring, &url, why, sizeof why) < 0)
        return s_fail(c, RDZV_E_BAD_REQUEST, "%s", why);
    r->router = item->valuestring;
    return 0;
}

static int s_parse_join(s_ctx_t *c, int max_world, rdzv_request_t *r)
{
    int64_t world = 0, rank = 0, timeout = RDZV_DEFAULT_TIMEOUT_MS;
    if (s_string(c, "group", true, true, &r->group) < 0
        || s_int(c, "world", true, 1, max_world, RDZV_E_BAD_WORLD, &world) < 0
        || s_int(c, "rank", true, -1e18, 1e18, RDZV_E_BAD_RANK, &rank) < 0
        || s_string(c, "host", true, false, &r->host) < 0
        || s_string(c, "node", true, false, &r->node) < 0
        || s_string(c, "session", true, false, &r->session) < 0
        || s_int(c, "timeout_ms", false, 1, RDZV_MAX_TIMEOUT_MS, RDZV_E_BAD_REQUEST, &timeout) < 0
        || s_string(c, "nccl_id", false, true, &r->nccl_id) < 0)
        return -1;
    if (rank < 0 || rank >= world) {
        *c->code = RDZV_E_BAD_RANK;
        snprintf(c->msg, c->msglen, "rank %lld is outside world %lld",
                 (long long) rank, (long long) world);
        return -1;
    }
    if (r->nccl_id && strcmp(r->nccl_id, "server") != 0 && strcmp(r->nccl_id, "none") != 0
        && strcmp(r->nccl_id, "rank0") != 0)
        return s_fail(c, RDZV_E_BAD_REQUEST,
                      "field \"%s\" must be \"server\", \"rank0\" or \"none\"", "nccl_id");
    int64_t count = 0;
    if (s_int(c, "nccl_ids", false, 1, RDZV_MAX_NCCL_IDS, RDZV_E_BAD_REQUEST, &count) < 0
        || s_hex_ids(c, r) < 0)
        return -1;
    r->nccl_ids = (int) count;
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(c->root, "members");
    if (members && !cJSON_IsBool(members))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a boolean", "members");
    r->members = !members || cJSON_IsTrue(members);
    const cJSON *replace = cJSON_GetObjectItemCaseSensitive(c->root, "replace");
    if (replace && !cJSON_IsBool(replace))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a boolean", "replace");
    r->replace = cJSON_IsTrue(replace);
    if (s_router(c, r) < 0)
        return -1;
    r->world = (int) world;
    r->rank = (int) rank;
    r->timeout_ms = timeout;
    return 0;
}

static int s_parse_kv(s_ctx_t *c, rdzv_request_t *r)
{
    r->timeout_ms = RDZV_DEFAULT_TIMEOUT_MS;
    if (s_string(c, "group", true, true, &r->group) < 0
        || s_int(c, "epoch", true, 1, 9e15, RDZV_E_BAD_REQUEST, &r->epoch) < 0
        || s_string(c, "key", true, true, &r->key) < 0
        || s_int(c, "timeout_ms", false, 1, RDZV_MAX_TIMEOUT_MS, RDZV_E_BAD_REQUEST,
                 &r->timeout_ms) < 0)
        return -1;
    if (r->op != RDZV_OP_KV_PUT)
        return 0;
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(c->root, "value");
    if (!cJSON_IsString(value))
        return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a string", "value");
    if (strlen(value->valuestring) > RDZV_MAX_VALUE)
        return s_fail(c, RDZV_E_TOO_LARGE, "field \"%s\" is over 65536 bytes", "value");
    r->value = value->valuestring;
    return 0;
}

static int s_parse_fields(s_ctx_t *c, int max_world, rdzv_request_t *r)
{
    switch (r->op) {
    case RDZV_OP_JOIN:
        return s_parse_join(c, max_world, r);
    case RDZV_OP_HEARTBEAT: {
        int64_t rank = 0;
        if (s_string(c, "group", true, true, &r->group) < 0
            || s_int(c, "rank", true, 0, max_world - 1, RDZV_E_BAD_RANK, &rank) < 0
            || s_string(c, "session", true, false, &r->session) < 0
            || s_int(c, "epoch", true, 1, 9e15, RDZV_E_BAD_REQUEST, &r->epoch) < 0)
            return -1;
        r->rank = (int) rank;
        const cJSON *serving = cJSON_GetObjectItemCaseSensitive(c->root, "serving");
        if (serving && !cJSON_IsBool(serving))
            return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a boolean", "serving");
        r->serving = !serving ? RDZV_HEALTH_UNKNOWN
                     : cJSON_IsTrue(serving) ? RDZV_HEALTH_SERVING : RDZV_HEALTH_DOWN;
        return 0;
    }
    case RDZV_OP_STATUS:
        return s_string(c, "group", false, true, &r->group);
    case RDZV_OP_GROUP_DELETE:
        return s_string(c, "group", true, true, &r->group);
    case RDZV_OP_GROUP_RESIZE: {
        int64_t world = 0;
        if (s_string(c, "group", true, true, &r->group) < 0
            || s_int(c, "world", true, 1, max_world, RDZV_E_BAD_WORLD, &world) < 0)
            return -1;
        r->world = (int) world;
        const cJSON *fresh = cJSON_GetObjectItemCaseSensitive(c->root, "fresh");
        if (fresh && !cJSON_IsBool(fresh))
            return s_fail(c, RDZV_E_BAD_REQUEST, "field \"%s\" must be a boolean", "fresh");
        r->fresh = cJSON_IsTrue(fresh);
        return 0;
    }
    case RDZV_OP_KV_PUT:
    case RDZV_OP_KV_GET:
    case RDZV_OP_KV_WAIT:
        return s_parse_kv(c, r);
    }
    /* s_parse_op sets only ops of RDZV_OPS: a value here is a bug, refused. */
    return s_fail(c, RDZV_E_UNKNOWN_OP, "op %d has no parser", (int) r->op);
}

static int s_parse_op(s_ctx_t *c, rdzv_request_t *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, "v");
    if (!cJSON_IsNumber(v) || v->valuedouble != RDZV_PROTO_VERSION)
        return s_fail(c, RDZV_E_BAD_VERSION, "%s", "field \"v\" must be 1");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(c->root, "op");
    if (!cJSON_IsString(op))
        return s_fail(c, RDZV_E_UNKNOWN_OP, "%s", "field \"op\" must name an operation");
    /* Only a value of the table becomes r->op: every switch over ops can
     * trust it. */
    for (int i = 0; i < RDZV_OP_COUNT; i++)
        if (strcmp(op->valuestring, rdzv_op_name((rdzv_op_t) i)) == 0) {
            r->op = (rdzv_op_t) i;
            return 0;
        }
    return s_fail(c, RDZV_E_UNKNOWN_OP, "unknown op \"%.*s\"",
                  (int) rdzv_utf8_prefix(op->valuestring, S_ECHO_MAX), op->valuestring);
}

/* cJSON stops at the end of the first value; a request is that value and
 * nothing but JSON whitespace after it, or a sender's mistake goes unseen. */
static int s_only_whitespace_after(s_ctx_t *c, const char *end, const char *frame_end)
{
    for (; end < frame_end; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
            return s_fail(c, RDZV_E_BAD_JSON, "%s", "text follows the request object");
    return 0;
}

/* cJSON decodes "\u0000" (and copies a raw NUL) into a C string, where it
 * silently cuts the value short: "a\u0000b" would name group "a". It also
 * takes any byte below 0x20 as whitespace and copies raw ones inside strings,
 * where JSON allows neither (RFC 8259: only space, tab, LF and CR between
 * tokens; control characters in strings escaped). The frame parsed, so one
 * walk that tracks quotes and escapes tells strings from the rest. */
static int s_plain_text(s_ctx_t *c, const char *frame, const char *end)
{
    bool in_string = false;
    for (const char *p = frame; p < end; p++) {
        unsigned char ch = (unsigned char) *p;
        if (ch == '\0')
            return s_fail(c, RDZV_E_BAD_REQUEST, "%s", "request holds a NUL byte");
        if (ch < 0x20 && (in_string || (ch != '\t' && ch != '\n' && ch != '\r')))
            return s_fail(c, RDZV_E_BAD_JSON, "request holds a raw control character 0x%02x",
                          ch);
        if (ch == '"') {
            in_string = !in_string;
        } else if (ch == '\\' && p + 1 < end) {
            if (p[1] == 'u' && end - p >= 6 && memcmp(p + 2, "0000", 4) == 0)
                return s_fail(c, RDZV_E_BAD_REQUEST, "%s", "request holds a \\u0000 escape");
            p++;
        }
    }
    return 0;
}

/* cJSON copies string bytes as they come, and every status and assignment
 * echoes them: one stored bad byte breaks every client's JSON decoder. Bytes
 * above 0x7f stand only in strings of a parsed frame, and cJSON refuses
 * escapes that are lone surrogates, so checking the frame checks them all. */
static int s_utf8(s_ctx_t *c, const char *frame, size_t len)
{
    if (!rdzv_utf8_valid(frame, len))
        return s_fail(c, RDZV_E_BAD_REQUEST, "%s", "request is not valid UTF-8");
    return 0;
}

static int s_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* cJSON keeps every member and lookups take the first, so a repeated key
 * means one thing to rdzvd and maybe another to whoever built the request.
 * Sorting the names finds a repeat without a quadratic scan of a big frame. */
static int s_keys_unique(s_ctx_t *c, const cJSON *object)
{
    int n = cJSON_GetArraySize(object);
    if (n < 2)
        return 0;
    /* A request has a dozen keys: no heap call for those (review: the
     * check had taken a join's parse from 1.4 to 2.0 us). */
    const char *small[S_KEYS_ON_STACK];
    const char **names = n <= S_KEYS_ON_STACK ? small : malloc((size_t) n * sizeof *names);
    if (!names)
        return s_fail(c, RDZV_E_BAD_REQUEST, "%s", "out of memory checking keys");
    int i = 0;
    for (const cJSON *m = object->child; m; m = m->next)
        names[i++] = m->string;
    qsort(names, (size_t) n, sizeof *names, s_name_cmp);
    int rc = 0;
    for (i = 1; i < n && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = s_fail(c, RDZV_E_BAD_REQUEST, "duplicate key \"%.*s\"",
                        (int) rdzv_utf8_prefix(names[i], S_ECHO_MAX), names[i]);
    if (names != small)
        free(names);
    return rc;
}

/* Every object in the request, nested ones included. */
static int s_no_duplicate_keys(s_ctx_t *c, const cJSON *node)
{
    if (cJSON_IsObject(node) && s_keys_unique(c, node) < 0)
        return -1;
    for (const cJSON *m = node->child; m; m = m->next)
        if (s_no_duplicate_keys(c, m) < 0)
            return -1;
    return 0;
}

static int s_check_frame(s_ctx_t *c, const char *frame, size_t len, const char *end)
{
    if (s_only_whitespace_after(c, end, frame + len) < 0 || s_plain_text(c, frame, end) < 0
        || s_utf8(c, frame, len) < 0)
        return -1;
    return s_no_duplicate_keys(c, c->root);
}

/* Every reply echoes the id, so it must survive the trip through a double
 * and back exactly: an integer in [0, 2^53 - 1] (2^53 + 1 reads as 2^53).
 * Anything else is refused with id 0, never echoed rounded. */
static int s_id(s_ctx_t *c, rdzv_request_t *req)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c->root, "id");
    if (!id)
        return 0;
    double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
    if (!isfinite(v) || v != floor(v) || v < 0 || v >= 9007199254740992.0)
        return s_fail(c, RDZV_E_BAD_REQUEST, "%s",
                      "field \"id\" must be an integer in [0, 2^53 - 1]");
    req->id = (int64_t) v;
    return 0;
}

int rdzv_request_parse(const char *frame, size_t len, int max_world,
                       rdzv_request_t *req, const char **code,
                       char *msg, size_t msglen)
{
    memset(req, 0, sizeof *req);
    s_ctx_t c = { .code = code, .msg = msg, .msglen = msglen };
    if (len > RDZV_MAX_FRAME)
        return s_fail(&c, RDZV_E_TOO_LARGE, "%s", "request frame is over 69632 bytes");
    const char *end = NULL;
    req->root = cJSON_ParseWithLengthOpts(frame, len, &end, false);
    if (!cJSON_IsObject(req->root)) {
        char why[160];
        rdzv_json_why(frame, len, req->root, end, why, sizeof why);
        rdzv_request_clear(req);
        return s_fail(&c, RDZV_E_BAD_JSON, "%s", why);
    }
    c.root = req->root;
    if (s_id(&c, req) < 0) {
        rdzv_request_clear(req);
        return -1;
    }
    if (s_check_frame(&c, frame, len, end) < 0 || s_parse_op(&c, req) < 0
        || s_parse_fields(&c, max_world, req) < 0) {
        int64_t keep_id = req->id;
        rdzv_request_clear(req);
        req->id = keep_id;
        return -1;
    }
    return 0;
}

void rdzv_request_clear(rdzv_request_t *req)
{
    cJSON_Delete(req->root);
    memset(req, 0, sizeof *req);
}
