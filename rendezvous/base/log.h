/* rdzvd's log on stderr: one line per event. Text lines read
 *   rdzvd 2026-11-29T22:57:25.882Z join group=demo rank=1 ...
 * JSON lines (--log-format json) are one object each, with time, level,
 * event, the key=value fields (numbers as numbers) and any other words in
 * "message". */
#ifndef RDZV_LOG_H
#define RDZV_LOG_H

#include <stdbool.h>

/* Levels, most severe first: a line is written when its event's level is
 * at or above the threshold (--log-level; default info). */
typedef enum {
    RDZV_LOG_ERROR,              /* fatal */
    RDZV_LOG_WARN,               /* refuse, open, nccl */
    RDZV_LOG_INFO,               /* every other event */
    RDZV_LOG_DEBUG,              /* auth: each CURVE handshake let in */
} rdzv_log_level_t;

void rdzv_log_set_json(bool json);
void rdzv_log_set_level(rdzv_log_level_t level);
/* "error", "warn", "info" or "debug" into *out; -1 for anything else. */
int rdzv_log_level_parse(const char *name, rdzv_log_level_t *out);
/* Whether a line of event would be written (to skip building one). */
bool rdzv_log_enabled(const char *event);
/* event names the kind of line (join, assign, epoch, refuse, ...); fmt
 * writes "key=value" words, quoted when a value has spaces. */
void rdzv_core_log(const char *event, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A refusal, event "refuse": its error code, and the group and rank it
 * concerns where known (NULL, -1: not known). In JSON these are fields of
 * their own and message stays whole: it may hold a client's strings, which
 * must not turn into fields. */
void rdzv_log_refuse(const char *code, const char *group, int rank, const char *message);
/* Room for " group=G rank=R" in a text line. */
#define RDZV_LOG_ABOUT_MAX 300

/* The JSON form of one line, malloc'd (exposed for tests). */
char *rdzv_log_json_line(const char *when, const char *event, const char *text);
char *rdzv_log_refuse_json(const char *when, const char *code, const char *group, int rank,
                           const char *message);

#endif
