/* rdzvd's open files: every connection is one, and at the limit libzmq
 * can accept no one. */
#ifndef RDZV_FDS_H
#define RDZV_FDS_H

#include <stdbool.h>

/* Raises the soft limit on open files to the hard one (a shell's default
 * of 1024 is a thousand connections); returns the limit now. */
long rdzv_fds_raise(void);
/* Descriptors open now, from /proc/self/fd (-1 without it): a directory
 * read, about 0.7 ms per thousand open. */
long rdzv_fds_open(void);
/* Whether fewer than reserve descriptors are left below the limit: a
 * poll() of the top reserve numbers, and a count only when one is open. */
bool rdzv_fds_short(int reserve);
/* The reserve that counts as short for limit: a twentieth, at least 64. */
int rdzv_fds_reserve(long limit);
/* The connections to allow at most by default: the limit less what is
 * open now and half the reserve, so that the journal, /metrics and the
 * NCCL root helpers still find descriptors with every connection taken
 * (and the warning at the reserve comes first). */
long rdzv_fds_connection_cap(long limit);

#endif
