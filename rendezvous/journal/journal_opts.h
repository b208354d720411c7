/* rdzvd's options for a journal kept elsewhere than --state-dir: etcd,
 * which replicas share and elect a leader in (etcd/etcd_journal.h). rdzvd.c
 * adds these to its own options and hands what they say to the core as an
 * rdzv_journal_remote_t (journal.h), naming no backend itself. */
#ifndef RDZV_JOURNAL_OPTS_H
#define RDZV_JOURNAL_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "etcd_http.h"
#include "journal.h"

struct rdzv_journal_remote {
    rdzv_etcd_config_t etcd;     /* etcd.endpoints NULL: none given */
};

/* getopt_long entries of these options (their values are
 * RDZV_JOURNAL_OPT_FIRST and on), ended by a zeroed entry. */
#define RDZV_JOURNAL_OPT_FIRST 2000
#define RDZV_JOURNAL_OPT_LAST 2099
extern const struct option rdzv_journal_options[];
/* Their lines of --help. */
void rdzv_journal_usage(FILE *out);
/* Takes one of them: 0, or -1 with the reason in err. */
int rdzv_journal_opt(rdzv_journal_remote_t *o, int id, const char *arg, char *err, size_t errlen);
/* Once every option is read: the remote journal they name, or NULL for
 * the file; -1 with the reason in err when they do not go together
 * (advertise: rdzvd's --advertise was given, which only a replicated
 * journal uses). */
int rdzv_journal_opts_done(rdzv_journal_remote_t *o, bool advertise,
                           const rdzv_journal_remote_t **remote, char *err, size_t errlen);

#endif
