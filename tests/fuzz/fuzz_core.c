/* libFuzzer harness: whole-core request handling (rendezvous/core/core.c) with a
 * real journal in a temporary state dir. The input is a sequence of frames
 * separated by '\n'; each byte before a frame's first '{' picks the peer it
 * comes from. After the batch the core is destroyed and rebuilt from its own
 * journal: a journal rdzvd wrote must always replay, and the groups it
 * describes must read back the same. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_drive.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char s_dir[64];

static void s_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/journal", s_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/snapshot", s_dir);
    unlink(path);
    rmdir(s_dir);
}

static rdzv_core_t *s_open(void)
{
    rdzv_config_t cfg = { .port_base = 19500, .ports_per_rank = 4, .port_limit = 19500 + 64 * 4,
                          .max_world = 64, .dead_after_ms = 15000, .do_fsync = false,
                          .nccl_root_timeout_s = 1, .state_dir = s_dir };
    char err[512];
    rdzv_core_t *core = rdzv_core_new(&cfg, err, sizeof err);
    if (!core) {
        fprintf(stderr, "fuzz_core: the core does not reopen its own journal: %s\n", err);
        abort();
    }
    return core;
}

static void s_drain(rdzv_core_t *core, int64_t now)
{
    size_t n = 0;
    rdzv_reply_t *out = NULL;
    drive_commit(core, now, &out, &n);
    for (size_t i = 0; i < n; i++) {
        cJSON *reply = cJSON_Parse(out[i].text);
        if (!reply) {
            fprintf(stderr, "fuzz_core: reply is not JSON: %s\n", out[i].text);
            abort();
        }
        cJSON_Delete(reply);
        rdzv_reply_clear(&out[i]);
    }
    free(out);
}

/* The status of every group as JSON text, sorted by name, without fields
 * that depend on time. */
static char *s_status(rdzv_core_t *core, int64_t now)
{
    rdzv_peer_t peer = { .len = 1, .id = { 0xff } };
    const char *req = "{\"v\":1,\"op\":\"status\",\"id\":1}";
    drive_request(core, &peer, req, strlen(req), now);
    size_t n = 0;
    rdzv_reply_t *out = NULL;
    drive_commit(core, now, &out, &n);
    char *text = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!text && out[i].peer.id[0] == 0xff) {
            text = out[i].text;
            out[i].text = NULL;
        }
        rdzv_reply_clear(&out[i]);
    }
    free(out);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!*s_dir) {
        strcpy(s_dir, "/tmp/rdzv-fuzz-core-XXXXXX");
        if (!mkdtemp(s_dir))
            abort();
        atexit(s_cleanup);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/journal", s_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/snapshot", s_dir);
    unlink(path);

    rdzv_core_t *core = s_open();
    int64_t now = 1000;
    size_t off = 0;
    while (off < size) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t end = nl ? (size_t) (nl - data) : size;
        rdzv_peer_t peer = { .len = 1 };
        size_t start = off;
        while (start < end && data[start] != '{')
            peer.id[0] = (unsigned char) (peer.id[0] * 31 + data[start++]);
        if (start == end)
            start = off;             /* no '{': feed the bytes as they are */
        drive_request(core, &peer, (const char *) data + start, end - start, now);
        now += 250;
        if ((end - off) % 3 == 0)
            drive_tick(core, now);
        s_drain(core, now);
        off = end + 1;
    }
    now += 100000;                   /* past every wait */
    drive_tick(core, now);
    s_drain(core, now);
    char *before = s_status(core, now);
    rdzv_core_destroy(&core);

    core = s_open();
    char *after = s_status(core, now);
    if (!before || !after) {
        fprintf(stderr, "fuzz_core: no status reply\n");
        abort();
    }
    /* "alive" and similar fields depend on when a rank was last seen,
     * "age_s" on when the epoch's first rank joined, which replay does not
     * restore, and the serving state on what heartbeats said (soft state,
     * never journaled); compare with those dropped. */
    cJSON *b = cJSON_Parse(before), *a = cJSON_Parse(after);
    const char *volatile_fields[] = { "alive", "last_seen_ms", "dead", "waiting", "age_s",
                                      "last_seen_s", "serving", "state", "live_count",
                                      "serving_count", "not_serving" };
    cJSON *docs[2] = { b, a };
    for (int d = 0; d < 2; d++) {
        cJSON *groups = cJSON_GetObjectItem(docs[d], "groups"), *g;
        cJSON_ArrayForEach(g, groups) {
            cJSON *members = cJSON_GetObjectItem(g, "members"), *m;
            cJSON_ArrayForEach(m, members)
                for (size_t f = 0; f < sizeof volatile_fields / sizeof *volatile_fields; f++)
                    cJSON_DeleteItemFromObject(m, volatile_fields[f]);
            for (size_t f = 0; f < sizeof volatile_fields / sizeof *volatile_fields; f++)
                cJSON_DeleteItemFromObject(g, volatile_fields[f]);
        }
    }
    /* Groups come in hash order, which replay need not reproduce: compare
     * them by name. */
    cJSON *bg = cJSON_GetObjectItem(b, "groups"), *ag = cJSON_GetObjectItem(a, "groups"), *g;
    bool same = cJSON_GetArraySize(bg) == cJSON_GetArraySize(ag);
    cJSON_ArrayForEach(g, bg) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(g, "group"));
        const cJSON *other = NULL, *h;
        cJSON_ArrayForEach(h, ag)
            if (name && cJSON_GetStringValue(cJSON_GetObjectItem(h, "group"))
                && strcmp(name, cJSON_GetStringValue(cJSON_GetObjectItem(h, "group"))) == 0)
                other = h;
        same = same && other && cJSON_Compare(g, other, 1);
    }
    if (!same) {
        fprintf(stderr, "fuzz_core: state differs after replay\nbefore: %s\nafter:  %s\n",
                before, after);
        abort();
    }
    cJSON_Delete(b);
    cJSON_Delete(a);
    free(before);
    free(after);
    rdzv_core_destroy(&core);
    return 0;
}
