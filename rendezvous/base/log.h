/* rdzvd's log on stderr: one line per event. Text lines read
 *   rdzvd 2026-11-29T22:57:25.882Z join group=demo rank=1 ...
 * JSON lines (--log-format json) are one object each, with time, level,
 * event, the key=value fields (numbers as numbers) and any other words in
 * "message". */
#ifndef RDZV_LOG_H
#define RDZV_LOG_H

#include <stdbool.h>

void rdzv_log_set_json(bool json);
/* event names the kind of line (join, assign, epoch, refuse, ...); fmt
 * writes "key=value" words, quoted when a value has spaces. */
void rdzv_core_log(const char *event, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The JSON form of one line, malloc'd (exposed for tests). */
char *rdzv_log_json_line(const char *when, const char *event, const char *text);

#endif
