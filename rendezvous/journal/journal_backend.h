/* What a place that keeps the journal provides: journal.c dispatches each
 * call of journal.h to its backend. impl is the backend's own object. A
 * backend that means nothing by a call leaves it NULL where journal.c says
 * what that stands for. Inside the journal's wing only. */
#ifndef RDZV_JOURNAL_BACKEND_H
#define RDZV_JOURNAL_BACKEND_H

#include "journal.h"

typedef struct {
    long (*replay)(void *impl, rdzv_journal_apply_fn *apply, void *arg, bool repair,
                   size_t *torn_bytes, char *err, size_t errlen);
    int (*append)(void *impl, const cJSON *record);
    bool (*pending)(const void *impl);
    int (*write)(void *impl, char *err, size_t errlen);
    uint64_t (*written)(const void *impl);
    void (*sync_start)(void *impl);
    int (*wait)(void *impl, uint64_t upto, char *err, size_t errlen);
    /* A compaction is the backend's own object too. */
    void *(*compact_start)(void *impl, cJSON *records, void (*release)(void *), void *arg);
    int (*compact_finish)(void *impl, void **c, bool wait);
    void (*compact_abort)(void *impl, void **c);
    uint64_t (*size)(const void *impl);
    void (*stats)(void *impl, rdzv_journal_stats_t *out);
    /* NULL: this backend always leads, and has no leader to name. */
    int (*campaign)(void *impl, const char *advertise, rdzv_journal_follow_fn *fn, void *arg,
                    char *err, size_t errlen);
    bool (*leading)(const void *impl);
    void (*leader)(void *impl, char *buf, size_t len);
    void (*close)(void *impl);
} rdzv_journal_backend_t;

struct rdzv_journal {
    const rdzv_journal_backend_t *ops;
    void *impl;
};

/* The backends. The file's (journal_file.c). */
extern const rdzv_journal_backend_t rdzv_journal_file_backend;
void *rdzv_journal_file_open(const char *dir, bool do_fsync, char *err, size_t errlen);
long rdzv_journal_file_repaired_at(const void *impl);
double rdzv_journal_file_sync_busy_s(void *impl);
void rdzv_journal_file_set_sync_fn(void *impl, int (*fn)(int fd));
/* The replicated one remote names (journal_opts.h): *ops and its object,
 * or NULL with the reason in err. */
void *rdzv_journal_remote_open(const rdzv_journal_remote_t *remote,
                               const rdzv_journal_backend_t **ops, char *err, size_t errlen);

#endif
