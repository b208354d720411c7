/* An assignment as the environment a rank's program gets, and as the flags
 * of a vLLM rank (docs/torchrun-lws.md lists every name). */
#include "assignment.h"

#include "env_text.h"
#include "rdzv_private.h"
#include "rdzv_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flags of an external-DP `vllm serve` rank: it reads these, not the
 * VLLM_DP_* variables, whenever its command line's DP size is above 1. */
static int s_write_vllm_args(const rdzv_assignment_t *self, FILE *f)
{
    if (self->dp_rpc_port <= 0)
        return -1;
    fprintf(f, "--data-parallel-size %d --data-parallel-rank %d --data-parallel-address ",
            self->world, self->rank);
    if (rdzv_env_quote(f, self->master_addr) < 0)
        return -1;
    if (fprintf(f, " --data-parallel-rpc-port %d", self->dp_rpc_port) < 0)
        return -1;
    /* The API port: host networking has every rank of a node share one
     * namespace, where vLLM's default 8000 would collide. */
    return self->api_port > 0 && fprintf(f, " --port %d", self->api_port) < 0 ? -1 : 0;
}

/* Runs write into a malloc'd string; NULL when it fails. */
static char *s_text(const rdzv_assignment_t *self, int (*write)(const rdzv_assignment_t *, FILE *))
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    int rc = write(self, f);
    if (fclose(f) != 0 || rc < 0) {
        free(text);
        return NULL;
    }
    return text;
}

RDZV_EXPORT char *rdzv_assignment_vllm_args(const rdzv_assignment_t *self)
{
    return self ? s_text(self, s_write_vllm_args) : NULL;
}

typedef struct {
    FILE *f;
    int rc;
} s_env_t;

static void s_put(s_env_t *e, const char *key, const char *value)
{
    if (e->rc == 0 && rdzv_env_put(e->f, key, value, false) < 0)
        e->rc = -1;
}

static void s_put_int(s_env_t *e, const char *key, long long v)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", v);
    s_put(e, key, text);
}

/* A comma-separated list into a malloc'd string. */
static char *s_join_ports(const rdzv_assignment_t *self)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    for (size_t i = 0; i < self->port_count; i++)
        fprintf(f, "%s%d", i ? "," : "", self->ports[i]);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static char *s_join_ids(const rdzv_assignment_t *self)
{
    size_t n = self->nccl_count;
    char *text = malloc(n * (RDZV_NCCL_ID_HEX + 1) + 1), *p = text;
    for (size_t i = 0; text && i < n; i++) {
        if (i)
            *p++ = ',';
        memcpy(p, self->nccl_ids[i], RDZV_NCCL_ID_HEX);
        p += RDZV_NCCL_ID_HEX;
    }
    if (text)
        *p = '\0';
    return text;
}

/* rdzv's own names, then torch's and torchrun's, then vLLM's
 * (docs/torchrun-lws.md): MASTER_PORT is the group's store, VLLM_PORT
 * starts vLLM's scans in this rank's probe pool. VLLM_DP_MASTER_PORT is
 * rank 0's first port in every epoch: vLLM's get_open_port() skips the ten
 * ports from it, which hold the store's places of both parities
 * (rdzv_role_shift), and a scan from VLLM_PORT, ten above, must not start
 * inside them (it would return the same skipped port forever). */
static int s_write_env(const rdzv_assignment_t *self, FILE *f)
{
    s_env_t e = { .f = f };
    char *ports = s_join_ports(self), *ids = s_join_ids(self), *args = NULL;
    char probe[16];
    snprintf(probe, sizeof probe, "%d-%d", self->probe_lo, self->probe_hi);
    if (!ports || !ids)
        e.rc = -1;
    s_put(&e, "RDZV_GROUP", self->group);
    s_put_int(&e, "RDZV_EPOCH", self->epoch);
    s_put_int(&e, "RDZV_RANK", self->rank);
    s_put_int(&e, "RDZV_WORLD", self->world);
    s_put(&e, "RDZV_MASTER_ADDR", self->master_addr);
    s_put_int(&e, "RDZV_MASTER_PORT", self->master_port);
    s_put(&e, "RDZV_PORTS", ports ? ports : "");
    s_put_int(&e, "RDZV_PORT_STORE", self->store_port);
    if (self->dp_rpc_port > 0)
        s_put_int(&e, "RDZV_PORT_DP_RPC", self->dp_rpc_port);
    if (self->api_port > 0)
        s_put_int(&e, "RDZV_PORT_API", self->api_port);
    s_put(&e, "RDZV_PORT_PROBE", probe);
    s_put(&e, "RDZV_NCCL_UNIQUE_ID", self->nccl_hex ? self->nccl_hex : "");
    s_put(&e, "RDZV_NCCL_UNIQUE_IDS", ids ? ids : "");
    if (self->local_world > 0) {
        s_put_int(&e, "RDZV_LOCAL_RANK", self->local_rank);
        s_put_int(&e, "RDZV_LOCAL_WORLD", self->local_world);
    }
    s_put(&e, "MASTER_ADDR", self->master_addr);
    s_put_int(&e, "MASTER_PORT", self->store_port);
    s_put_int(&e, "RANK", self->rank);
    s_put_int(&e, "WORLD_SIZE", self->world);
    if (self->local_world > 0) {
        s_put_int(&e, "LOCAL_RANK", self->local_rank);
        s_put_int(&e, "LOCAL_WORLD_SIZE", self->local_world);
    }
    if (self->group_world > 0) {
        s_put_int(&e, "GROUP_RANK", self->group_rank);
        s_put_int(&e, "GROUP_WORLD_SIZE", self->group_world);
    }
    s_put_int(&e, "VLLM_PORT", self->probe_lo);
    s_put_int(&e, "VLLM_DP_RANK", self->rank);
    s_put_int(&e, "VLLM_DP_SIZE", self->world);
    s_put(&e, "VLLM_DP_MASTER_IP", self->master_addr);
    s_put_int(&e, "VLLM_DP_MASTER_PORT",
              self->store_port - rdzv_role_shift((int) self->port_count, self->epoch));
    if (self->local_world > 0) {
        s_put_int(&e, "VLLM_DP_RANK_LOCAL", self->local_rank);
        s_put_int(&e, "VLLM_DP_SIZE_LOCAL", self->local_world);
    }
    if (self->dp_rpc_port > 0 && e.rc == 0 && !(args = rdzv_assignment_vllm_args(self)))
        e.rc = -1;
    if (args)
        s_put(&e, "RDZV_VLLM_ARGS", args);
    free(args);
    free(ports);
    free(ids);
    return e.rc;
}

RDZV_EXPORT char *rdzv_assignment_env(const rdzv_assignment_t *self)
{
    return self ? s_text(self, s_write_env) : NULL;
}
