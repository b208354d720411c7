/* Drives an rdzvd core through core.h's sequence, as the shards do, for
 * the unit tests, the fuzzers and the release benchmark. */
#ifndef RDZV_TEST_CORE_DRIVE_H
#define RDZV_TEST_CORE_DRIVE_H

#include "core.h"

#include <stdlib.h>
#include <string.h>

/* One request in a batch of its own, left queued for the next commit as a
 * busy shard leaves it. */
static inline void drive_request(rdzv_core_t *core, const rdzv_peer_t *peer, const char *frame,
                                 size_t len, int64_t now_ms)
{
    rdzv_parsed_t parsed;
    rdzv_core_parse(core, frame, len, &parsed);
    rdzv_core_begin(core, now_ms);
    rdzv_core_handle(core, peer, &parsed);
    rdzv_core_defer(core);
}

/* The tick the first shard runs every S_TICK_MS, without its commit. */
static inline void drive_tick(rdzv_core_t *core, int64_t now_ms)
{
    rdzv_core_begin(core, now_ms);
    rdzv_core_tick(core);
    rdzv_core_defer(core);
}

/* Commits what is queued and waits until it is durable. The replies of
 * every shard, formatted, come back in one array in *out (each for the
 * caller to rdzv_reply_clear, then free the array); out NULL drops them.
 * rdzv_core_end's 0 or -1. */
static inline int drive_commit(rdzv_core_t *core, int64_t now_ms, rdzv_reply_t **out,
                               size_t *count)
{
    rdzv_commit_t c;
    rdzv_core_begin(core, now_ms);
    int rc = rdzv_core_end(core, &c);
    rdzv_core_wait(core, c.gate);
    size_t total = 0;
    for (int t = 0; t < RDZV_MAX_SHARDS; t++)
        total += c.out[t].len;
    rdzv_reply_t *all = total ? malloc(total * sizeof *all) : NULL;
    size_t n = 0;
    for (int t = 0; t < RDZV_MAX_SHARDS; t++) {
        for (size_t i = 0; i < c.out[t].len; i++) {
            rdzv_reply_t *r = &c.out[t].v[i];
            if (all && out && rdzv_reply_render(r) == 0)
                all[n++] = *r;
            else
                rdzv_reply_clear(r);
        }
        free(c.out[t].v);
    }
    if (out) {
        *out = all;
        *count = n;
    } else {
        free(all);
    }
    return rc;
}

#endif
