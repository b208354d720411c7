/* The process's one ZeroMQ context, shared by every librdzv client and
 * heartbeat: N clients in one process cost one I/O thread, not N. */
#ifndef RDZV_CONTEXT_H
#define RDZV_CONTEXT_H

/* The context, made on first use; NULL if it cannot be. Each acquire
 * takes a reference that rdzv_context_release gives back, closing the
 * context with the last (its sockets closed first). */
void *rdzv_context_acquire(void);
void rdzv_context_release(void *ctx);

#endif
