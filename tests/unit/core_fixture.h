/* What every test_core_*.c shares: a core over a fresh state directory,
 * driven without sockets through core.h's sequence (core_drive.h), and the
 * replies of each batch kept by peer. fx_setup/fx_teardown are the checked
 * fixture; a test reads core, now and replies directly. */
#ifndef RDZV_TEST_CORE_FIXTURE_H
#define RDZV_TEST_CORE_FIXTURE_H

#include <check.h>
#include <stdint.h>

#include "core_drive.h"
#include "core_state.h"   /* white-box: the tests read the core's state */
#include "rdzv_proto.h"

/* Peer numbers a test may use: one ROUTER identity byte each. */
#define FX_PEERS 64

extern char dir[64];              /* the state directory */
extern rdzv_core_t *core;
extern int64_t now;               /* the clock every request and tick runs at */
/* A stand-in for rdzv-nccl-root when a test sets it: server-made IDs then. */
extern char nccl_helper[128];
/* Replies of one batch, by peer number; NULL for a peer still waiting. */
extern cJSON *replies[FX_PEERS];

void fx_setup(void);
void fx_teardown(void);
/* A test case named for its area, added to s with the fixture. */
TCase *fx_tcase(Suite *s, const char *name);

/* The configuration fx_setup opens with: ports 19500 on, 32 a rank, 8 blocks. */
rdzv_config_t fx_config(void);
void fx_open(void);
/* Replaces core by one with cfg, over the same state directory. */
void fx_reopen_cfg(rdzv_config_t cfg);
/* The same with these limits. */
void fx_reopen_with(rdzv_limits_t limits);

void fx_clear_replies(void);
/* Commits what is queued and files its replies into replies[]. */
void fx_collect(void);
/* One request from peer who, formatted, then its batch committed. */
void fx_send(int who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fx_join(int who, const char *group, int world, int rank, const char *node,
             const char *session);
/* kv_put into group g's epoch 1. */
void fx_put(int who, const char *key, const char *value);

/* Peer who's assignment; fails the test if it got none. */
const cJSON *fx_assignment(int who);
int fx_field(const cJSON *a, const char *name);
/* The error code peer who got, or "(none)". */
const char *fx_error(int who);

#endif
