#include "shim_owner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set at load and in a forked child. */
static _Atomic pid_t s_owner;

static void s_atfork_child(void)
{
    atomic_store(&s_owner, getpid());
    pthread_mutex_unlock(&s_lock);
}

/* At load, not on first use: a process may fork before it ever calls into
 * the shim, and its child must still own its copy. */
__attribute__((constructor)) static void s_remember_owner(void)
{
    atomic_store(&s_owner, getpid());
    pthread_atfork(rdzv_shim_owner_lock, rdzv_shim_owner_unlock, s_atfork_child);
}

void rdzv_shim_owner_lock(void)
{
    pthread_mutex_lock(&s_lock);
}

void rdzv_shim_owner_unlock(void)
{
    pthread_mutex_unlock(&s_lock);
}

bool rdzv_shim_owner_foreign(void)
{
    pid_t owner = atomic_load(&s_owner);
    return owner != 0 && owner != getpid();
}
