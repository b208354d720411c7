/* The core's journal: compaction, when it runs and that it keeps the state
 * and requests going, and the "plans" record of a release, replayed in each
 * of the forms rdzvd has written. */
#include "check_run.h"
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_fixture.h"

/* Commits until the compaction in flight, if any, is in place: its thread
 * writes the snapshot while requests go on. */
static void s_settle_compaction(void)
{
    for (int i = 0; core->compaction && i < 5000; i++) {
        usleep(1000);
        ck_assert_int_eq(drive_commit(core, now, NULL, NULL), 0);
    }
    ck_assert_ptr_null(core->compaction);
}

/* Compaction runs once the file passes --compact-mib, then not again until
 * it has doubled. Before, it ran at every commit after the first (journal
 * offsets only grow), and a state bigger than the limit would stay bigger
 * after each rewrite. */
START_TEST(test_compaction_not_every_commit)
{
    rdzv_core_destroy(&core);
    rdzv_config_t cfg = fx_config();
    cfg.compact_bytes = 4096;
    char err[256];
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_msg(core != NULL, "%s", err);
    fx_join(0, "a", 1, 0, "n0", "s0");
    char big[1501];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 4; i++) {
        fx_send(1, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"k%d\","
                "\"value\":\"%s\"}", i, big);
        s_settle_compaction();
    }
    uint64_t compactions = core->metrics.compactions;
    ck_assert_uint_ge(compactions, 1);
    ck_assert_uint_gt(rdzv_journal_size(core->journal), cfg.compact_bytes);  /* the state alone */
    for (int i = 0; i < 10; i++) {
        fx_send(1, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"s\","
                "\"value\":\"%d\"}", i);
        ck_assert_int_eq(drive_commit(core, now, NULL, NULL), 0);
        s_settle_compaction();
    }
    ck_assert_uint_eq(core->metrics.compactions, compactions);
    /* Once the file has doubled it is compacted again, and only then. */
    uint64_t left = core->compacted_size;
    int puts = 0;
    while (core->metrics.compactions == compactions && puts < 50) {
        ck_assert_uint_le(rdzv_journal_size(core->journal), 2 * left);
        fx_send(1, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"k%d\","
                "\"value\":\"%s\"}", puts++ % 4, big);
        s_settle_compaction();
    }
    ck_assert_uint_eq(core->metrics.compactions, compactions + 1);
    ck_assert_int_gt(puts, 1);
    fx_clear_replies();
}
END_TEST

/* A compaction's snapshot is written by a thread of its own: while its
 * fdatasync is held, puts go on and are answered, and once it is in place
 * they are in the new journal too (a restart reads them back). */
static atomic_int s_hold_snapshot;

static int s_snapshot_sync(int fd)
{
    char link[64], path[4096] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    bool snapshot = n > 0 && (path[n] = '\0', strstr(path, "journal.tmp") != NULL);
    while (snapshot && atomic_load(&s_hold_snapshot))
        usleep(1000);
    return fdatasync(fd);
}

START_TEST(test_compaction_off_the_lock)
{
    rdzv_config_t cfg = fx_config();
    cfg.compact_bytes = 4096;
    fx_reopen_cfg(cfg);
    rdzv_journal_set_sync_fn(core->journal, s_snapshot_sync);
    atomic_store(&s_hold_snapshot, 1);
    fx_join(0, "a", 1, 0, "n0", "s0");
    char big[1501];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 8 && !core->compaction; i++)
        fx_send(1, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"k%d\","
                "\"value\":\"%s\"}", i, big);
    ck_assert_ptr_nonnull(core->compaction);          /* started, and held */
    for (int i = 0; i < 20; i++) {
        fx_send(2, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":1,\"key\":\"m%d\","
                "\"value\":\"during\"}", i);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(replies[2], "ok")));
    }
    ck_assert_ptr_nonnull(core->compaction);          /* still writing */
    ck_assert_uint_eq(core->metrics.compactions, 0);
    atomic_store(&s_hold_snapshot, 0);
    s_settle_compaction();
    ck_assert_uint_eq(core->metrics.compactions, 1);
    fx_reopen_cfg(fx_config());
    for (int i = 0; i < 20; i += 19) {
        fx_send(3, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"a\",\"epoch\":1,\"key\":\"m%d\"}", i);
        ck_assert_str_eq(cJSON_GetObjectItem(replies[3], "value")->valuestring, "during");
    }
    fx_send(3, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"a\",\"epoch\":1,\"key\":\"k0\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[3], "value")->valuestring, big);
    fx_clear_replies();
}
END_TEST

START_TEST(test_compaction_keeps_state)
{
    fx_join(0, "a", 2, 0, "n0", "s0");
    fx_join(1, "a", 2, 1, "n1", "s1");
    fx_join(1, "a", 2, 1, "n1", "s1-new");          /* epoch 2 */
    fx_join(0, "a", 2, 0, "n0", "s0");
    fx_send(2, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":2,\"key\":\"k\",\"value\":\"v\"}");
    fx_join(3, "b", 3, 0, "n0", "t0");               /* a forming group */
    for (int i = 0; i < 20; i++)
        fx_send(4, "{\"v\":1,\"op\":\"kv_put\",\"group\":\"a\",\"epoch\":2,\"key\":\"k\",\"value\":\"v%d\"}", i);
    char *before = cJSON_PrintUnformatted(fx_assignment(1));
    fx_clear_replies();
    uint64_t size = rdzv_journal_size(core->journal);
    ck_assert_int_eq(rdzv_core_compact(core), 0);
    ck_assert_uint_lt(rdzv_journal_size(core->journal), size);
    rdzv_core_destroy(&core);
    fx_open();
    fx_join(1, "a", 2, 1, "n1", "s1-new");
    char *after = cJSON_PrintUnformatted(fx_assignment(1));
    ck_assert_str_eq(before, after);
    fx_send(5, "{\"v\":1,\"op\":\"kv_get\",\"group\":\"a\",\"epoch\":2,\"key\":\"k\"}");
    ck_assert_str_eq(cJSON_GetObjectItem(replies[5], "value")->valuestring, "v19");
    /* The forming group still waits for its other ranks, and plans hold. */
    fx_join(6, "b", 3, 1, "n0", "t1");
    fx_join(7, "b", 3, 2, "n0", "t2");
    ck_assert_int_eq((int) cJSON_GetArrayItem(cJSON_GetObjectItem(fx_assignment(6), "ports"), 0)->valuedouble, 19564);
    free(before);
    free(after);
    fx_clear_replies();
}
END_TEST

/* Replay collector: counts record types and keeps every record twice over:
 * with each "plans" record split into the one-block "plan" records of
 * rdzvd 0.1.0 (old_style), and with the node of each block named in it
 * (named_nodes, as rdzvd wrote "plans" until 2026-11-30). A block's node is
 * its rank's as the last join record before the "plans" record left it. */
typedef struct {
    int plans, plan, named;
    cJSON *old_style, *named_nodes;
    char node_of[16][32];        /* by rank, the group's last join */
} s_journal_scan_t;

static int s_scan_record(void *arg, const cJSON *rec)
{
    s_journal_scan_t *scan = arg;
    const char *type = cJSON_GetObjectItem(rec, "t")->valuestring;
    scan->plan += strcmp(type, "plan") == 0;
    if (strcmp(type, "join") == 0) {
        int rank = (int) cJSON_GetObjectItem(rec, "rank")->valuedouble;
        ck_assert_int_lt(rank, 16);
        snprintf(scan->node_of[rank], sizeof scan->node_of[rank], "%s",
                 cJSON_GetObjectItem(rec, "node")->valuestring);
    }
    if (strcmp(type, "plans") != 0) {
        cJSON_AddItemToArray(scan->old_style, cJSON_Duplicate(rec, 1));
        cJSON_AddItemToArray(scan->named_nodes, cJSON_Duplicate(rec, 1));
        return 0;
    }
    scan->plans++;
    scan->named += cJSON_GetObjectItem(rec, "nodes") != NULL;
    const cJSON *ranks = cJSON_GetObjectItem(rec, "ranks");
    const cJSON *starts = cJSON_GetObjectItem(rec, "starts");
    cJSON *named = cJSON_Duplicate(rec, 1), *nodes = cJSON_AddArrayToObject(named, "nodes");
    for (int i = 0; i < cJSON_GetArraySize(ranks); i++) {
        const char *node = scan->node_of[(int) cJSON_GetArrayItem(ranks, i)->valuedouble];
        cJSON_AddItemToArray(nodes, cJSON_CreateString(node));
        cJSON *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "t", "plan");
        cJSON_AddStringToObject(one, "g", cJSON_GetObjectItem(rec, "g")->valuestring);
        cJSON_AddNumberToObject(one, "rank", cJSON_GetArrayItem(ranks, i)->valuedouble);
        cJSON_AddStringToObject(one, "node", node);
        cJSON_AddNumberToObject(one, "start", cJSON_GetArrayItem(starts, i)->valuedouble);
        cJSON_AddNumberToObject(one, "count", cJSON_GetObjectItem(rec, "count")->valuedouble);
        cJSON_AddItemToArray(scan->old_style, one);
    }
    cJSON_AddItemToArray(scan->named_nodes, named);
    return 0;
}

static s_journal_scan_t s_scan_journal(void)
{
    char err[256];
    s_journal_scan_t scan = { .old_style = cJSON_CreateArray(),
                              .named_nodes = cJSON_CreateArray() };
    rdzv_journal_t *j = rdzv_journal_open(dir, false, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    size_t torn = 0;
    ck_assert_int_ge(rdzv_journal_replay(j, s_scan_record, &scan, false, &torn, err, sizeof err), 0);
    rdzv_journal_destroy(&j);
    return scan;
}

static void s_rewrite_journal(const cJSON *records)
{
    char err[256];
    rdzv_journal_t *j = rdzv_journal_open(dir, false, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(rdzv_journal_compact(j, cJSON_Duplicate(records, 1)), 0);
    rdzv_journal_destroy(&j);
}

/* A release writes its new port blocks as one "plans" record without node
 * names; journals of the one-"plan"-per-block kind, and "plans" records
 * that name each block's node, still replay to the same state. */
START_TEST(test_plans_record)
{
    for (int r = 0; r < 6; r++)
        fx_join(r, "g", 6, r, r < 3 ? "n0" : "n1", "s");
    char *before = cJSON_PrintUnformatted(fx_assignment(4));
    fx_clear_replies();
    rdzv_core_destroy(&core);
    s_journal_scan_t scan = s_scan_journal();
    ck_assert_int_eq(scan.plans, 1);
    ck_assert_int_eq(scan.named, 0);
    ck_assert_int_eq(scan.plan, 0);
    ck_assert_int_eq(cJSON_GetArraySize(scan.old_style), 1 + 6 + 6 + 1);   /* group, joins, plan, complete */

    const cJSON *kinds[2] = { scan.old_style, scan.named_nodes };
    for (int k = 0; k < 2; k++) {
        s_rewrite_journal(kinds[k]);
        fx_open();
        ck_assert_int_eq(rdzv_plans_count(core->state.plans, "n0"), 3);
        ck_assert_int_eq(rdzv_plans_count(core->state.plans, "n1"), 3);
        fx_join(4, "g", 6, 4, "n1", "s");
        char *after = cJSON_PrintUnformatted(fx_assignment(4));
        ck_assert_str_eq(before, after);
        free(after);
        fx_clear_replies();
        rdzv_core_destroy(&core);
    }

    /* A "plans" record whose arrays disagree is corruption, not half a plan. */
    cJSON *bad = cJSON_CreateArray();
    for (int i = 0; i < cJSON_GetArraySize(scan.old_style); i++) {
        const cJSON *rec = cJSON_GetArrayItem(scan.old_style, i);
        if (strcmp(cJSON_GetObjectItem(rec, "t")->valuestring, "plan") != 0) {
            cJSON_AddItemToArray(bad, cJSON_Duplicate(rec, 1));
            continue;
        }
        if (cJSON_GetObjectItem(rec, "rank")->valuedouble != 0)
            continue;
        cJSON *plans = cJSON_CreateObject();
        cJSON_AddStringToObject(plans, "t", "plans");
        cJSON_AddStringToObject(plans, "g", "g");
        cJSON_AddNumberToObject(plans, "count", 32);
        int ranks[2] = { 0, 1 }, starts[2] = { 19500, 19532 };
        const char *nodes[1] = { "n0" };
        cJSON_AddItemToObject(plans, "ranks", cJSON_CreateIntArray(ranks, 2));
        cJSON_AddItemToObject(plans, "nodes", cJSON_CreateStringArray(nodes, 1));
        cJSON_AddItemToObject(plans, "starts", cJSON_CreateIntArray(starts, 2));
        cJSON_AddItemToArray(bad, plans);
    }
    s_rewrite_journal(bad);
    char err[256];
    rdzv_config_t cfg = fx_config();
    core = rdzv_core_new(&cfg, err, sizeof err);
    ck_assert_ptr_null(core);
    cJSON_Delete(bad);
    cJSON_Delete(scan.old_style);
    cJSON_Delete(scan.named_nodes);
    free(before);
}
END_TEST

/* A block recorded by a "plans" record is on its rank's node of that
 * epoch: a rank that later rejoins from another node gets a new block
 * there, and after a restart both blocks are where they were. */
START_TEST(test_plans_record_rank_moves_node)
{
    fx_join(0, "g", 2, 0, "n0", "s0");
    fx_join(1, "g", 2, 1, "n1", "s1");
    ck_assert_int_eq(fx_field(fx_assignment(1), "epoch"), 1);
    fx_clear_replies();
    now += 16000;                                /* the old Pod is gone: quiet for --dead-after */
    fx_join(1, "g", 2, 1, "n2", "s1b");           /* rank 1's Pod moved */
    fx_join(0, "g", 2, 0, "n0", "s0");
    ck_assert_int_eq(fx_field(fx_assignment(1), "epoch"), 2);
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "n2", "g", 1), 19500);
    fx_clear_replies();
    rdzv_core_destroy(&core);
    fx_open();
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "n0", "g", 0), 19500);
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "n1", "g", 1), 19500);
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "n2", "g", 1), 19500);
    ck_assert_int_eq(rdzv_plans_count(core->state.plans, "n2"), 1);
}
END_TEST

/* Node names are free text: they must reach the plans through the journal
 * (the join records) unchanged, quotes, backslashes and UTF-8 included. */
START_TEST(test_plans_record_escapes_node_names)
{
    /* JSON text of the names; the names are q"u\o and p\xc3\xb6d. */
    fx_join(0, "g", 4, 0, "q\\\"u\\\\o", "s");
    fx_join(1, "g", 4, 1, "q\\\"u\\\\o", "s");
    fx_join(2, "g", 4, 2, "p\xc3\xb6" "d", "s");
    fx_join(3, "g", 4, 3, "p\xc3\xb6" "d", "s");
    ck_assert_int_eq(fx_field(fx_assignment(1), "master_port"), 19500);
    char *before = cJSON_PrintUnformatted(fx_assignment(3));
    fx_clear_replies();
    rdzv_core_destroy(&core);
    fx_open();
    ck_assert_int_eq(rdzv_plans_count(core->state.plans, "q\"u\\o"), 2);
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "q\"u\\o", "g", 1), 19532);
    ck_assert_int_eq(rdzv_plans_find(core->state.plans, "p\xc3\xb6" "d", "g", 3), 19532);
    fx_join(3, "g", 4, 3, "p\xc3\xb6" "d", "s");
    char *after = cJSON_PrintUnformatted(fx_assignment(3));
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    fx_clear_replies();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core_journal");
    TCase *compaction = fx_tcase(s, "compaction");
    tcase_add_test(compaction, test_compaction_not_every_commit);
    tcase_add_test(compaction, test_compaction_off_the_lock);
    tcase_add_test(compaction, test_compaction_keeps_state);
    TCase *plans_record = fx_tcase(s, "plans_record");
    tcase_add_test(plans_record, test_plans_record);
    tcase_add_test(plans_record, test_plans_record_rank_moves_node);
    tcase_add_test(plans_record, test_plans_record_escapes_node_names);
    return rdzv_check_run(s);
}
