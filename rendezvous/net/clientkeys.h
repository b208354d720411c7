/* The CURVE public keys rdzvd accepts (--clients DIR), read again whenever
 * the directory's contents change, so that keys rotate without a restart.
 *
 * What is read: every entry directly in DIR whose name does not start with
 * '.' and does not end in "_secret", and that is, once symbolic links are
 * followed, a regular file; each must be a certificate with a
 * curve/public-key of 40 Z85 characters (rdzv keygen's PATH). Hidden
 * entries (a Kubernetes Secret's "..data" link and its "..TIMESTAMP"
 * folders) and subdirectories are never read; a Secret's keys are the
 * visible links into "..data", so its atomic swap of "..data" changes what
 * they point at, and the next check sees it.
 *
 * A check lists DIR and stats those entries; only when a name, a target
 * (device and inode), a size or a time differs from the last read are the
 * files read again. A DIR that cannot be listed keeps the keys last read. */
#ifndef RDZV_CLIENTKEYS_H
#define RDZV_CLIENTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rdzv_clientkeys rdzv_clientkeys_t;

#define RDZV_CURVE_KEY_BYTES 32

/* Reads DIR; NULL with err set if DIR is not a directory. */
rdzv_clientkeys_t *rdzv_clientkeys_new(const char *dir, char *err, size_t errlen);
void rdzv_clientkeys_destroy(rdzv_clientkeys_t **self_p);

/* Checks DIR and reads it again if its contents changed, logging the new
 * count (event "clients") and each file it skipped. 1: the keys were read
 * again, 0: nothing changed, -1: DIR could not be listed (logged; the keys
 * stay). */
int rdzv_clientkeys_refresh(rdzv_clientkeys_t *self);

/* The file key came from (its name in DIR), or NULL if key is not accepted. */
const char *rdzv_clientkeys_lookup(const rdzv_clientkeys_t *self,
                                   const uint8_t key[RDZV_CURVE_KEY_BYTES]);
/* Distinct keys accepted now. */
int rdzv_clientkeys_count(const rdzv_clientkeys_t *self);

#endif
