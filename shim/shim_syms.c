#include "shim_syms.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static rdzv_shim_real_t s_real;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* dlsym() returns an object pointer; ISO C has no cast to a function one. */
typedef union {
    void *obj;
    rdzv_shim_bind_fn bind;
    rdzv_shim_close_fn close;
} s_sym_t;

static s_sym_t s_lookup(const char *name)
{
    s_sym_t sym = { .obj = dlsym(RTLD_NEXT, name) };
    Dl_info next, mine;
    bool is_shim = sym.obj && dladdr(sym.obj, &next) && dladdr((void *) &s_real, &mine)
                   && next.dli_fbase == mine.dli_fbase;
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

static void s_resolve(void)
{
    s_real.bind = s_lookup("bind").bind;
    s_real.close = s_lookup("close").close;
}

const rdzv_shim_real_t *rdzv_shim_real(void)
{
    pthread_once(&s_once, s_resolve);
    return &s_real;
}
