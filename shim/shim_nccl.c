/* ncclGetUniqueId for programs that link NCCL directly (RDZV_SHIM_NCCL=1).
 *
 * In rank 0's process (RDZV_RANK=0) the n-th call returns the epoch's n-th
 * ID from RDZV_NCCL_UNIQUE_IDS (comma-separated hex, set by `rdzv agent` from
 * the assignment; RDZV_NCCL_UNIQUE_ID when the list is absent). Every other
 * call (the setting off, another rank, past the end of the list) goes to
 * the real function: the next definition after the shim, or the one in an
 * already loaded libnccl.so.2 (a program that dlopen'ed NCCL with
 * RTLD_LOCAL, as PyTorch's extension does, is not in the global scope).
 *
 * RDZV_SHIM_NCCL_VERBOSE=1 says on stderr which calls were answered how.
 *
 * Programs that look NCCL up themselves (dlopen + dlsym, as vLLM's pynccl
 * does through ctypes) never reach this function: docs/agent.md. */
#include "rdzv_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RDZV_SHIM_EXPORT __attribute__((visibility("default")))

/* ncclUniqueId is a struct of 128 bytes; ncclResult_t an int-sized enum.
 * The values are NCCL's (nccl.h): ncclSuccess 0, ncclSystemError 2,
 * ncclInvalidArgument 4. tests/nccl/test_shim_nccl.c checks them against
 * nccl.h where it is installed. */
#define S_ID_BYTES 128
#define S_NCCL_SUCCESS 0
#define S_NCCL_SYSTEM_ERROR 2
#define S_NCCL_INVALID_ARGUMENT 4

typedef struct { char internal[S_ID_BYTES]; } s_nccl_id_t;
typedef int (*s_get_id_fn)(s_nccl_id_t *);

RDZV_SHIM_EXPORT int ncclGetUniqueId(s_nccl_id_t *id);

static atomic_int s_calls;              /* rank 0's calls so far */
static s_get_id_fn s_real;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

typedef union {
    void *obj;
    s_get_id_fn fn;
} s_sym_t;

static void s_say(const char *msg)
{
    (void) !write(STDERR_FILENO, msg, strlen(msg));
}

/* Whether sym is defined in this shim rather than in NCCL. */
static int s_is_mine(void *sym)
{
    Dl_info theirs, mine;
    return dladdr(sym, &theirs) && dladdr((void *) &s_calls, &mine)
           && theirs.dli_fbase == mine.dli_fbase;
}

static void s_resolve(void)
{
    s_sym_t sym = { .obj = dlsym(RTLD_NEXT, "ncclGetUniqueId") };
    if (!sym.obj || s_is_mine(sym.obj)) {
        sym.obj = NULL;
        /* Only a library that is already loaded: never a second NCCL. */
        void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
        if (lib)
            sym.obj = dlsym(lib, "ncclGetUniqueId");
        if (sym.obj && s_is_mine(sym.obj))
            sym.obj = NULL;
    }
    s_real = sym.fn;
}

static int s_call_real(s_nccl_id_t *id)
{
    pthread_once(&s_once, s_resolve);
    if (s_real)
        return s_real(id);
    s_say("librdzv_shim: ncclGetUniqueId: no NCCL library is loaded in this process\n");
    return S_NCCL_SYSTEM_ERROR;
}

/* The n-th entry (0-based) of the comma-separated list into out: 1 found,
 * 0 the list is shorter, -1 the entry is not 256 hex characters. */
static int s_nth_id(const char *list, int n, unsigned char out[S_ID_BYTES])
{
    const char *p = list;
    for (int i = 0; i < n; i++) {
        p = strchr(p, ',');
        if (!p)
            return 0;
        p++;
    }
    size_t len = strcspn(p, ",");
    if (len == 0)
        return 0;
    if (len != 2 * S_ID_BYTES)
        return -1;
    char hex[2 * S_ID_BYTES + 1];
    memcpy(hex, p, len);
    hex[len] = '\0';
    return rdzv_hex_decode(hex, out, S_ID_BYTES) == 0 ? 1 : -1;
}

static int s_enabled(void)
{
    const char *on = getenv("RDZV_SHIM_NCCL");
    const char *rank = getenv("RDZV_RANK");
    return on && strcmp(on, "1") == 0 && rank && strcmp(rank, "0") == 0;
}

RDZV_SHIM_EXPORT int ncclGetUniqueId(s_nccl_id_t *id)
{
    if (!id)
        return S_NCCL_INVALID_ARGUMENT;
    if (!s_enabled())
        return s_call_real(id);
    const char *list = getenv("RDZV_NCCL_UNIQUE_IDS");
    if (!list || !*list)
        list = getenv("RDZV_NCCL_UNIQUE_ID");
    int n = atomic_fetch_add(&s_calls, 1);
    unsigned char raw[S_ID_BYTES];
    int found = list ? s_nth_id(list, n, raw) : 0;
    if (found < 0) {
        s_say("librdzv_shim: RDZV_NCCL_UNIQUE_IDS holds an entry that is not 256 hex "
              "characters\n");
        return S_NCCL_INVALID_ARGUMENT;
    }
    const char *verbose = getenv("RDZV_SHIM_NCCL_VERBOSE");
    if (verbose && strcmp(verbose, "1") == 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "librdzv_shim: ncclGetUniqueId call %d: %s\n", n + 1,
                 found ? "the epoch's ID from RDZV_NCCL_UNIQUE_IDS" : "real NCCL");
        s_say(msg);
    }
    if (found == 0)
        return s_call_real(id);
    memcpy(id->internal, raw, S_ID_BYTES);
    return S_NCCL_SUCCESS;
}
