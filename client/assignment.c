/* An assignment: what rdzvd told one rank of one epoch (docs/protocol.md,
 * "join"). Parsed strictly: a rank must never start with a half-understood
 * port plan or master address. */
#include "assignment.h"

#include "rdzv_private.h"
#include "rdzv_proto.h"
#include "rdzv_util.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_PORT_MIN 1
#define S_PORT_MAX 65535

/* An integral JSON number in [min, max] into *out; false otherwise. */
static bool s_int_in(const cJSON *item, int64_t min, int64_t max, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return false;
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < (double) min || v > (double) max)
        return false;
    *out = (int64_t) v;
    return true;
}

static bool s_field_int(const cJSON *obj, const char *key, int64_t min, int64_t max,
                        int64_t *out)
{
    return s_int_in(cJSON_GetObjectItemCaseSensitive(obj, key), min, max, out);
}

/* A string field that passes valid(); a copy into *out. */
static bool s_field_str(const cJSON *obj, const char *key, bool (*valid)(const char *),
                        char **out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(item) || !valid(item->valuestring))
        return false;
    *out = strdup(item->valuestring);
    return *out != NULL;
}

static bool s_parse_ports(rdzv_assignment_t *self, const cJSON *obj)
{
    const cJSON *ports = cJSON_GetObjectItemCaseSensitive(obj, "ports");
    int n = cJSON_GetArraySize(ports);
    if (!cJSON_IsArray(ports) || n <= 0)
        return false;
    self->ports = calloc((size_t) n, sizeof *self->ports);
    if (!self->ports)
        return false;
    const cJSON *item;
    cJSON_ArrayForEach(item, ports) {
        int64_t port;
        if (!s_int_in(item, S_PORT_MIN, S_PORT_MAX, &port))
            return false;
        self->ports[self->port_count++] = (int) port;
    }
    return true;
}

/* "named_ports" (docs/protocol.md): the group's store and DP RPC ports,
 * distinct, the store the master port, this rank's API port in its plan
 * and outside its probe pool, and the probe pool inside the plan. An rdzvd
 * without them gets the layout it had: the store the master port, the
 * probe pool the whole plan, no DP RPC or API port; one without "api" has
 * no API port. */
static bool s_parse_named(rdzv_assignment_t *self, const cJSON *obj)
{
    const cJSON *named = cJSON_GetObjectItemCaseSensitive(obj, "named_ports");
    int first = self->ports[0], last = self->ports[self->port_count - 1];
    if (!named) {
        self->store_port = self->master_port;
        self->probe_lo = first;
        self->probe_hi = last;
        return true;
    }
    const cJSON *probe = cJSON_GetObjectItemCaseSensitive(named, "probe");
    const cJSON *api = cJSON_GetObjectItemCaseSensitive(named, "api");
    int64_t store, rpc, lo, hi, api_port = 0;
    if (!cJSON_IsObject(named) || !s_field_int(named, "store", S_PORT_MIN, S_PORT_MAX, &store)
        || !s_field_int(named, "dp_rpc", S_PORT_MIN, S_PORT_MAX, &rpc)
        || !cJSON_IsArray(probe) || cJSON_GetArraySize(probe) != 2
        || !s_int_in(cJSON_GetArrayItem(probe, 0), first, last, &lo)
        || !s_int_in(cJSON_GetArrayItem(probe, 1), lo, last, &hi)
        || store != self->master_port || rpc == store
        || (api && (!s_int_in(api, first, last, &api_port) || (api_port >= lo && api_port <= hi))))
        return false;
    self->api_port = (int) api_port;
    self->store_port = (int) store;
    self->dp_rpc_port = (int) rpc;
    self->probe_lo = (int) lo;
    self->probe_hi = (int) hi;
    return true;
}

/* One ID (hex text) appended to the list, normalised to lowercase. */
static bool s_add_nccl(rdzv_assignment_t *self, const cJSON *item)
{
    unsigned char raw[RDZV_NCCL_ID_BYTES];
    if (!cJSON_IsString(item) || strlen(item->valuestring) != RDZV_NCCL_ID_HEX
        || rdzv_hex_decode(item->valuestring, raw, sizeof raw) != 0)
        return false;
    char *hex = malloc(RDZV_NCCL_ID_HEX + 1);
    if (!hex)
        return false;
    rdzv_hex_encode(raw, sizeof raw, hex);
    self->nccl_ids[self->nccl_count++] = hex;
    return true;
}

/* "nccl_unique_id" (the first ID or null) is required; "nccl_unique_ids"
 * (every ID) is optional, since older servers do not send it. When both are
 * there the first of the list must be the single one. */
static bool s_parse_nccl(rdzv_assignment_t *self, const cJSON *obj)
{
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(obj, "nccl_unique_id");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "nccl_unique_ids");
    if (!cJSON_IsNull(one) && !cJSON_IsString(one))    /* required, as ever */
        return false;
    if (list && !cJSON_IsNull(list) && !cJSON_IsArray(list))
        return false;
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (n == 0 && cJSON_IsString(one))
        n = 1;
    if (n == 0)
        return !cJSON_IsString(one);
    if (n > RDZV_MAX_NCCL_IDS)
        return false;
    self->nccl_ids = calloc((size_t) n, sizeof *self->nccl_ids);
    if (!self->nccl_ids)
        return false;
    if (cJSON_IsArray(list) && cJSON_GetArraySize(list) > 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
            if (!s_add_nccl(self, item))
                return false;
        }
    } else if (!s_add_nccl(self, one)) {
        return false;
    }
    if (cJSON_IsString(one) && strcasecmp(one->valuestring, self->nccl_ids[0]) != 0)
        return false;
    self->nccl_hex = self->nccl_ids[0];
    return true;
}

/* One member per rank, each rank exactly once: the reply comes only after
 * the whole world joined. No list at all is an assignment asked for
 * without it (the default: it is O(world) for every rank). */
static bool s_parse_members(rdzv_assignment_t *self, const cJSON *obj)
{
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(obj, "members");
    if (!members)
        return true;
    if (!cJSON_IsArray(members) || cJSON_GetArraySize(members) != self->world)
        return false;
    self->members = calloc((size_t) self->world, sizeof *self->members);
    if (!self->members)
        return false;
    const cJSON *m;
    cJSON_ArrayForEach(m, members) {
        int64_t rank;
        if (!cJSON_IsObject(m) || !s_field_int(m, "rank", 0, self->world - 1, &rank)
            || self->members[rank].host)
            return false;
        rdzv_assignment_member_t *slot = &self->members[rank];
        if (!s_field_str(m, "host", rdzv_text_valid, &slot->host)
            || !s_field_str(m, "node", rdzv_text_valid, &slot->node))
            return false;
    }
    return true;
}

static bool s_parse_scalars(rdzv_assignment_t *self, const cJSON *obj)
{
    int64_t epoch, rank, world, port;
    if (!s_field_str(obj, "group", rdzv_name_valid, &self->group)
        || !s_field_int(obj, "epoch", 1, INT64_MAX / 2, &epoch)
        || !s_field_int(obj, "world", 1, INT_MAX, &world)
        || !s_field_int(obj, "rank", 0, world - 1, &rank)
        || !s_field_str(obj, "master_addr", rdzv_text_valid, &self->master_addr)
        || !s_field_int(obj, "master_port", S_PORT_MIN, S_PORT_MAX, &port))
        return false;
    self->epoch = epoch;
    self->world = (int) world;
    self->rank = (int) rank;
    self->master_port = (int) port;
    /* Optional: rdzvd sends them since assignments stopped carrying the
     * members list by default; older ones did not. */
    int64_t local_rank = -1, local_world = 0;
    if (cJSON_GetObjectItemCaseSensitive(obj, "local_world")
        && (!s_field_int(obj, "local_world", 1, world, &local_world)
            || !s_field_int(obj, "local_rank", 0, local_world - 1, &local_rank)))
        return false;
    self->local_rank = (int) local_rank;
    self->local_world = (int) local_world;
    int64_t group_rank = -1, group_world = 0;
    if (cJSON_GetObjectItemCaseSensitive(obj, "group_world")
        && (!s_field_int(obj, "group_world", 1, world, &group_world)
            || !s_field_int(obj, "group_rank", 0, group_world - 1, &group_rank)))
        return false;
    self->group_rank = (int) group_rank;
    self->group_world = (int) group_world;
    return true;
}

rdzv_assignment_t *rdzv_assignment_from_cjson(const cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    rdzv_assignment_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    if (!s_parse_scalars(self, obj) || !s_parse_ports(self, obj) || !s_parse_named(self, obj)
        || !s_parse_nccl(self, obj) || !s_parse_members(self, obj)
        || !(self->json = cJSON_PrintUnformatted(obj)))
        rdzv_assignment_destroy(&self);
    return self;
}

RDZV_EXPORT rdzv_assignment_t *rdzv_assignment_from_json(const char *json)
{
    if (!json)
        return NULL;
    cJSON *root = cJSON_Parse(json);
    rdzv_assignment_t *self = rdzv_assignment_from_cjson(root);
    cJSON_Delete(root);
    return self;
}

RDZV_EXPORT void rdzv_assignment_destroy(rdzv_assignment_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_assignment_t *self = *self_p;
    if (self->members) {
        for (int i = 0; i < self->world; i++) {
            free(self->members[i].host);
            free(self->members[i].node);
        }
    }
    free(self->members);
    free(self->group);
    free(self->master_addr);
    free(self->ports);
    for (size_t i = 0; i < self->nccl_count; i++)
        free(self->nccl_ids[i]);
    free(self->nccl_ids);
    free(self->json);
    free(self);
    *self_p = NULL;
}

RDZV_EXPORT const char *rdzv_assignment_group(const rdzv_assignment_t *self)
{
    return self ? self->group : NULL;
}

RDZV_EXPORT int64_t rdzv_assignment_epoch(const rdzv_assignment_t *self)
{
    return self ? self->epoch : -1;
}

RDZV_EXPORT int rdzv_assignment_rank(const rdzv_assignment_t *self)
{
    return self ? self->rank : -1;
}

RDZV_EXPORT int rdzv_assignment_world(const rdzv_assignment_t *self)
{
    return self ? self->world : -1;
}

RDZV_EXPORT const char *rdzv_assignment_master_addr(const rdzv_assignment_t *self)
{
    return self ? self->master_addr : NULL;
}

RDZV_EXPORT int rdzv_assignment_local_rank(const rdzv_assignment_t *self)
{
    return self ? self->local_rank : -1;
}

RDZV_EXPORT int rdzv_assignment_local_world(const rdzv_assignment_t *self)
{
    return self ? self->local_world : 0;
}

RDZV_EXPORT int rdzv_assignment_master_port(const rdzv_assignment_t *self)
{
    return self ? self->master_port : -1;
}

RDZV_EXPORT int rdzv_assignment_group_rank(const rdzv_assignment_t *self)
{
    return self ? self->group_rank : -1;
}

RDZV_EXPORT int rdzv_assignment_group_world(const rdzv_assignment_t *self)
{
    return self ? self->group_world : 0;
}

RDZV_EXPORT int rdzv_assignment_store_port(const rdzv_assignment_t *self)
{
    return self ? self->store_port : -1;
}

RDZV_EXPORT int rdzv_assignment_dp_rpc_port(const rdzv_assignment_t *self)
{
    return self ? self->dp_rpc_port : -1;
}

RDZV_EXPORT int rdzv_assignment_api_port(const rdzv_assignment_t *self)
{
    return self ? self->api_port : -1;
}

RDZV_EXPORT int rdzv_assignment_probe_ports(const rdzv_assignment_t *self, int *lo, int *hi)
{
    if (!self || !lo || !hi)
        return RDZV_ERR_USAGE;
    *lo = self->probe_lo;
    *hi = self->probe_hi;
    return RDZV_OK;
}

RDZV_EXPORT size_t rdzv_assignment_port_count(const rdzv_assignment_t *self)
{
    return self ? self->port_count : 0;
}

RDZV_EXPORT int rdzv_assignment_port(const rdzv_assignment_t *self, size_t i)
{
    return self && i < self->port_count ? self->ports[i] : -1;
}

RDZV_EXPORT const char *rdzv_assignment_nccl_id_hex(const rdzv_assignment_t *self)
{
    return self ? self->nccl_hex : NULL;
}

RDZV_EXPORT int rdzv_assignment_nccl_id(const rdzv_assignment_t *self,
                                        unsigned char out[128])
{
    if (!self || !self->nccl_hex || !out)
        return RDZV_ERR_USAGE;
    return rdzv_hex_decode(self->nccl_hex, out, RDZV_NCCL_ID_BYTES) == 0
           ? RDZV_OK : RDZV_ERR_USAGE;
}

RDZV_EXPORT size_t rdzv_assignment_nccl_id_count(const rdzv_assignment_t *self)
{
    return self ? self->nccl_count : 0;
}

RDZV_EXPORT const char *rdzv_assignment_nccl_id_hex_at(const rdzv_assignment_t *self,
                                                       size_t i)
{
    return self && i < self->nccl_count ? self->nccl_ids[i] : NULL;
}

RDZV_EXPORT size_t rdzv_assignment_member_count(const rdzv_assignment_t *self)
{
    return self && self->members ? (size_t) self->world : 0;
}

RDZV_EXPORT const char *rdzv_assignment_member_host(const rdzv_assignment_t *self,
                                                    size_t i)
{
    return self && self->members && i < (size_t) self->world ? self->members[i].host : NULL;
}

RDZV_EXPORT const char *rdzv_assignment_member_node(const rdzv_assignment_t *self,
                                                    size_t i)
{
    return self && self->members && i < (size_t) self->world ? self->members[i].node : NULL;
}

RDZV_EXPORT const char *rdzv_assignment_json(const rdzv_assignment_t *self)
{
    return self ? self->json : NULL;
}
