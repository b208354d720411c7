#include "shim_syms.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static rdzv_shim_real_t s_real;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;
/* Set once s_real is filled: after that, a load instead of a call into
 * libc's pthread_once on every wrapped call. */
static _Atomic bool s_resolved;

/* dlsym() returns an object pointer; ISO C has no cast to a function one. */
typedef union {
    void *obj;
    rdzv_shim_bind_fn bind;
    rdzv_shim_close_fn close;
    rdzv_shim_dup2_fn dup2;
    rdzv_shim_dup3_fn dup3;
    rdzv_shim_close_range_fn close_range;
} s_sym_t;

static bool s_is_shim(void *obj)
{
    Dl_info next, mine;
    return dladdr(obj, &next) && dladdr((void *) &s_real, &mine)
           && next.dli_fbase == mine.dli_fbase;
}

static s_sym_t s_lookup(const char *name)
{
    s_sym_t sym = { .obj = dlsym(RTLD_NEXT, name) };
    bool is_shim = sym.obj && s_is_shim(sym.obj);
    if (!sym.obj || is_shim) {
        char msg[160];
        int n = snprintf(msg, sizeof msg, "librdzv_shim: cannot find the real %s(): %s\n",
                         name, sym.obj ? "it resolves to the shim" : dlerror());
        if (n > 0)
            (void) !write(STDERR_FILENO, msg, (size_t) n < sizeof msg ? (size_t) n : sizeof msg - 1);
        abort();
    }
    return sym;
}

/* A C library older than close_range() (glibc 2.34): the system call. */
static int s_sys_close_range(unsigned int first, unsigned int last, int flags)
{
#ifdef SYS_close_range
    return (int) syscall(SYS_close_range, first, last, flags);
#else
    (void) first, (void) last, (void) flags;
    errno = ENOSYS;
    return -1;
#endif
}

static void s_resolve(void)
{
    s_real.bind = s_lookup("bind").bind;
    s_real.close = s_lookup("close").close;
    s_real.dup2 = s_lookup("dup2").dup2;
    s_real.dup3 = s_lookup("dup3").dup3;
    s_sym_t range = { .obj = dlsym(RTLD_NEXT, "close_range") };
    s_real.close_range = range.obj && !s_is_shim(range.obj) ? range.close_range
                                                            : s_sys_close_range;
    atomic_store_explicit(&s_resolved, true, memory_order_release);
}

RDZV_SHIM_HOT const rdzv_shim_real_t *rdzv_shim_real(void)
{
    if (!atomic_load_explicit(&s_resolved, memory_order_acquire))
        pthread_once(&s_once, s_resolve);
    return &s_real;
}
