/* Server-made NCCL unique IDs. ncclGetUniqueId starts the bootstrap root in
 * the calling process and NCCL has no call to stop it, so rdzvd runs it in a
 * helper process (rdzv-nccl-root) that it can end: on a new epoch, a group
 * delete, rdzvd's exit (the helper sees EOF on its stdin) or the timeout. */
#ifndef RDZV_NCCLROOT_H
#define RDZV_NCCLROOT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct rdzv_ncclroot rdzv_ncclroot_t;

/* Starts helper with a root timeout of timeout_s and waits (up to 10 s) for
 * its count IDs, appended to ids as 256-character hex strings. NULL on
 * failure, reason in err. */
rdzv_ncclroot_t *rdzv_ncclroot_start(const char *helper, int timeout_s, int count,
                                     cJSON *ids, char *err, size_t errlen);
/* Ends the helper (and the root in it) and reaps it. */
void rdzv_ncclroot_destroy(rdzv_ncclroot_t **self_p);
/* The helper's stdout: readable when it reports "done" or "timeout". */
int rdzv_ncclroot_fd(const rdzv_ncclroot_t *self);
/* Reads the helper's report: 1 timeout, 0 done (every rank arrived),
 * -1 nothing yet or the helper died. */
int rdzv_ncclroot_poll(rdzv_ncclroot_t *self);
pid_t rdzv_ncclroot_pid(const rdzv_ncclroot_t *self);

#endif
