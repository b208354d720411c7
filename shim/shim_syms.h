/* The real libc functions behind the shim's wrappers, looked up once. */
#ifndef RDZV_SHIM_SYMS_H
#define RDZV_SHIM_SYMS_H

#include <sys/socket.h>

/* glibc declares bind() with a transparent union under _GNU_SOURCE; the
 * wrapper has to match its prototype exactly. */
typedef int (*rdzv_shim_bind_fn)(int, __CONST_SOCKADDR_ARG, socklen_t);
typedef int (*rdzv_shim_close_fn)(int);
typedef int (*rdzv_shim_dup2_fn)(int, int);
typedef int (*rdzv_shim_dup3_fn)(int, int, int);
typedef int (*rdzv_shim_close_range_fn)(unsigned int, unsigned int, int);

typedef struct {
    rdzv_shim_bind_fn bind;
    rdzv_shim_close_fn close;
    rdzv_shim_dup2_fn dup2;
    rdzv_shim_dup3_fn dup3;
    /* glibc 2.34 and later; before, the system call itself. */
    rdzv_shim_close_range_fn close_range;
} rdzv_shim_real_t;

/* On the functions of the pass-through path (bind() and close() that are
 * not the shim's): the compiler puts them in .text.hot, which the linker
 * keeps together. Where every system call empties the TLB (kernel page
 * table isolation without PCID), each page a call touches costs a page
 * walk; on one page the shim adds tens of ns to a call, not a hundred. */
#define RDZV_SHIM_HOT __attribute__((hot))

/* Resolves the symbols on first use (dlsym(RTLD_NEXT) under pthread_once)
 * and aborts, saying why, when one is missing or is the shim's own
 * (close_range may be missing: the system call stands in). */
const rdzv_shim_real_t *rdzv_shim_real(void);

#endif
