/* The real libc functions behind the shim's wrappers, looked up once. */
#ifndef RDZV_SHIM_SYMS_H
#define RDZV_SHIM_SYMS_H

#include <sys/socket.h>

/* glibc declares bind() with a transparent union under _GNU_SOURCE; the
 * wrapper has to match its prototype exactly. */
typedef int (*rdzv_shim_bind_fn)(int, __CONST_SOCKADDR_ARG, socklen_t);
typedef int (*rdzv_shim_close_fn)(int);

typedef struct {
    rdzv_shim_bind_fn bind;
    rdzv_shim_close_fn close;
} rdzv_shim_real_t;

/* Resolves the symbols on first use (dlsym(RTLD_NEXT) under pthread_once)
 * and aborts, saying why, when one is missing or is the shim's own. */
const rdzv_shim_real_t *rdzv_shim_real(void);

#endif
