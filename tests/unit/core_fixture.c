/* The fixture of the core's unit tests: see core_fixture.h. */
#include "core_fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char dir[64];
rdzv_core_t *core;
int64_t now;
char nccl_helper[128];
cJSON *replies[FX_PEERS];

rdzv_config_t fx_config(void)
{
    return (rdzv_config_t) { .port_base = 19500, .ports_per_rank = 32, .port_limit = 19500 + 8 * 32,
                             .max_world = 1024, .dead_after_ms = 15000, .do_fsync = false,
                             .state_dir = dir, .nccl_default = *nccl_helper != '\0',
                             .nccl_helper = *nccl_helper ? nccl_helper : NULL,
                             .nccl_root_timeout_s = 60 };
}

void fx_open(void)
{
    char err[256];
    rdzv_config_t cfg = fx_config();
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_msg(core != NULL, "%s", err);
}

void fx_reopen_cfg(rdzv_config_t cfg)
{
    rdzv_core_destroy(&core);
    char err[256];
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_msg(core != NULL, "%s", err);
}

void fx_reopen_with(rdzv_limits_t limits)
{
    rdzv_config_t cfg = fx_config();
    cfg.limits = limits;
    fx_reopen_cfg(cfg);
}

void fx_setup(void)
{
    strcpy(dir, "/tmp/rdzv-core-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    now = 1000;
    fx_open();
}

void fx_teardown(void)
{
    rdzv_core_destroy(&core);
    *nccl_helper = '\0';
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

TCase *fx_tcase(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, fx_setup, fx_teardown);
    suite_add_tcase(s, tc);
    return tc;
}

void fx_clear_replies(void)
{
    for (int i = 0; i < FX_PEERS; i++) {
        cJSON_Delete(replies[i]);
        replies[i] = NULL;
    }
}

void fx_collect(void)
{
    size_t n = 0;
    rdzv_reply_t *out = NULL;
    ck_assert_int_eq(drive_commit(core, now, &out, &n), 0);
    for (size_t i = 0; i < n; i++) {
        int who = out[i].peer.id[0];
        ck_assert_int_lt(who, FX_PEERS);
        cJSON_Delete(replies[who]);
        replies[who] = cJSON_Parse(out[i].text);
        rdzv_reply_clear(&out[i]);
    }
    free(out);
}

void fx_send(int who, const char *fmt, ...)
{
    char frame[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(frame, sizeof frame, fmt, ap);
    va_end(ap);
    rdzv_peer_t peer = { .len = 1 };
    peer.id[0] = (unsigned char) who;
    drive_request(core, &peer, frame, strlen(frame), now);
    fx_collect();
}

void fx_join(int who, const char *group, int world, int rank, const char *node,
             const char *session)
{
    fx_send(who, "{\"v\":1,\"id\":%d,\"op\":\"join\",\"group\":\"%s\",\"world\":%d,\"rank\":%d,"
            "\"host\":\"10.0.0.%d\",\"node\":\"%s\",\"session\":\"%s\",\"timeout_ms\":5000}",
            who, group, world, rank, rank, node, session);
}

void fx_put(int who, const char *key, const char *value)
{
    fx_send(who, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"g\",\"epoch\":1,\"key\":\"%s\","
            "\"value\":\"%s\"}", key, value);
}

const cJSON *fx_assignment(int who)
{
    ck_assert_msg(replies[who] != NULL, "peer %d got no reply", who);
    const cJSON *a = cJSON_GetObjectItem(replies[who], "assignment");
    ck_assert_msg(a != NULL, "peer %d got %s", who, cJSON_PrintUnformatted(replies[who]));
    return a;
}

int fx_field(const cJSON *a, const char *name)
{
    return (int) cJSON_GetObjectItem(a, name)->valuedouble;
}

const char *fx_error(int who)
{
    ck_assert_msg(replies[who] != NULL, "peer %d got no reply", who);
    const cJSON *e = cJSON_GetObjectItem(replies[who], "error");
    return e ? cJSON_GetObjectItem(e, "code")->valuestring : "(none)";
}
