/* This process's descriptors and threads as fstat() and /proc/self show
 * them, read with system calls only: no malloc, no stdio, and no close()
 * that would come back through the wrapper. The callers are close() and
 * close_range(), which may run in a signal handler or in a forked child
 * about to exec. */
#ifndef RDZV_SHIM_PROC_H
#define RDZV_SHIM_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* Whether fd is open on the socket whose identity is (dev, ino). */
bool rdzv_shim_proc_same_socket(int fd, dev_t dev, ino_t ino);
/* A descriptor of this process, not skip, open on the socket (dev, ino)
 * (a dup() of it), or -1; always -1 for ino 0 (identity unknown). */
int rdzv_shim_proc_find_socket(dev_t dev, ino_t ino, int skip);
/* Threads of this process (/proc/self/stat, field 20), 0 if unknown. */
long rdzv_shim_proc_threads(void);

#endif
