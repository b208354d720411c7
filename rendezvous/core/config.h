/* rdzvd's settings, as rdzvd.c reads them from its command line. */
#ifndef RDZV_CONFIG_H
#define RDZV_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "journal.h"
#include "quota.h"

typedef struct {
    int port_base, ports_per_rank, port_limit, max_world;
    int64_t dead_after_ms;
    bool do_fsync, repair;
    bool nccl_default;           /* groups get server-made IDs by default */
    int max_nccl_ids;            /* IDs per epoch a group may ask for */
    const char *nccl_helper;     /* path of rdzv-nccl-root, NULL without NCCL */
    int nccl_root_timeout_s;
    const char *state_dir;
    const char *group_token;     /* every request must carry it; NULL: none */
    const char *tokens_dir;      /* DIR/GROUP: each group's own token; NULL: none */
    uint64_t compact_bytes;      /* compact the journal past this size; 0: never */
    /* A group whose first epoch never formed and that nobody waits in or
     * has been heard from for this long is deleted; 0: never. */
    int64_t forming_ttl_ms;
    rdzv_limits_t limits;
    /* A replicated journal (journal_opts.h); NULL: the file in state_dir. */
    const rdzv_journal_remote_t *journal_remote;
    /* --router-allow: the routers a group may name (whole URLs, or a
     * prefix of them ending before '/' or '#'; "*" any), nrouter_allow of
     * them; none: a join naming a router is refused. */
    const char *const *router_allow;
    int nrouter_allow;
} rdzv_config_t;

#endif
