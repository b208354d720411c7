#include "context.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>
#include <zmq.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static void *s_ctx;
static int s_users;
static pid_t s_owner;           /* the process that made s_ctx */

static void s_prepare(void) { pthread_mutex_lock(&s_lock); }
static void s_parent(void) { pthread_mutex_unlock(&s_lock); }

/* A child after fork() has the parent's context without its I/O thread:
 * unusable, and terminating it would wait for sockets it cannot close.
 * It is left as it is, and the child makes its own on first use. */
static void s_child(void)
{
    s_ctx = NULL;
    s_users = 0;
    s_owner = 0;
    pthread_mutex_unlock(&s_lock);
}

static void s_init(void)
{
    pthread_atfork(s_prepare, s_parent, s_child);
}

void *rdzv_context_acquire(void)
{
    pthread_once(&s_once, s_init);
    pthread_mutex_lock(&s_lock);
    if (!s_ctx) {
        s_ctx = zmq_ctx_new();
        s_owner = getpid();
        /* libzmq allows 1023 sockets a context by default: one client more
         * in the process would fail. As many as the process may open
         * files, each socket needing one at least, up to libzmq's limit. */
        struct rlimit r;
        int limit = s_ctx ? zmq_ctx_get(s_ctx, ZMQ_SOCKET_LIMIT) : 0;
        if (limit > 0 && getrlimit(RLIMIT_NOFILE, &r) == 0) {
            int want = r.rlim_cur == RLIM_INFINITY || r.rlim_cur > (rlim_t) limit
                       ? limit : (int) r.rlim_cur;
            if (want > 1023)
                zmq_ctx_set(s_ctx, ZMQ_MAX_SOCKETS, want);
        }
    }
    void *ctx = s_ctx;
    if (ctx)
        s_users++;
    pthread_mutex_unlock(&s_lock);
    return ctx;
}

void rdzv_context_release(void *ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&s_lock);
    /* A context of a parent process (this is a forked child) is not ours. */
    bool last = ctx == s_ctx && s_owner == getpid() && --s_users == 0;
    if (last)
        s_ctx = NULL;
    pthread_mutex_unlock(&s_lock);
    /* Outside the lock: terminating waits for the I/O thread, and another
     * thread may make a fresh context meanwhile. */
    if (last)
        zmq_ctx_term(ctx);
}
