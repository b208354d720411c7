#include "http_sd.h"

#include "rdzv_proto.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* HOST:PORT of member m's API (the api named port of its plan), [HOST] for
 * an IPv6 address; false while it has no plan. */
static bool s_api(const cJSON *m, char *out, size_t len)
{
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(m, "host");
    const cJSON *ports = cJSON_GetObjectItemCaseSensitive(m, "ports");
    if (!cJSON_IsString(host) || !cJSON_IsArray(ports) || !cJSON_IsNumber(ports->child))
        return false;
    snprintf(out, len, strchr(host->valuestring, ':') ? "[%s]:%d" : "%s:%d", host->valuestring,
             ports->child->valueint + RDZV_ROLE_API);
    return true;
}

static const char *s_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double s_num(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

cJSON *rdzv_http_endpoints(const cJSON *group)
{
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "group", s_str(group, "group"));
    cJSON_AddNumberToObject(out, "epoch", s_num(group, "epoch"));
    cJSON_AddStringToObject(out, "state", s_str(group, "state"));
    cJSON *list = cJSON_AddArrayToObject(out, "endpoints");
    /* A forming epoch's ranks serve nothing of it yet. */
    const cJSON *members = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(group, "complete"))
                           ? cJSON_GetObjectItemCaseSensitive(group, "members") : NULL;
    const cJSON *m;
    cJSON_ArrayForEach(m, members) {
        char api[300], url[320];
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "alive"))
            || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "serving"))
            || !s_api(m, api, sizeof api))
            continue;
        snprintf(url, sizeof url, "http://%s", api);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", s_num(m, "rank"));
        cJSON_AddStringToObject(e, "url", url);
        cJSON_AddStringToObject(e, "node", s_str(m, "node"));
        cJSON_AddNumberToObject(e, "epoch", s_num(group, "epoch"));
        cJSON_AddItemToArray(list, e);
    }
    return out;
}

/* Prometheus's labels are strings. */
static void s_label_num(cJSON *labels, const char *key, double v)
{
    char text[32];
    snprintf(text, sizeof text, "%.0f", v);
    cJSON_AddStringToObject(labels, key, text);
}

cJSON *rdzv_http_sd(const cJSON *groups)
{
    cJSON *out = cJSON_CreateArray();
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "complete")))
            continue;
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(g, "members")) {
            char api[300];
            if (!s_api(m, api, sizeof api))
                continue;
            cJSON *target = cJSON_CreateObject();
            cJSON *targets = cJSON_AddArrayToObject(target, "targets");
            cJSON_AddItemToArray(targets, cJSON_CreateString(api));
            cJSON *labels = cJSON_AddObjectToObject(target, "labels");
            cJSON_AddStringToObject(labels, "group", s_str(g, "group"));
            s_label_num(labels, "rank", s_num(m, "rank"));
            s_label_num(labels, "epoch", s_num(g, "epoch"));
            cJSON_AddStringToObject(labels, "node", s_str(m, "node"));
            cJSON_AddItemToArray(out, target);
        }
    }
    return out;
}
