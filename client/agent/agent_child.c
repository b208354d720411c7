#include "agent_child.h"
#include "agent_proto.h"
#include "env_text.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

typedef struct {
    char **v;
    size_t n;
    size_t cap;
} s_env_t;

static int s_push(s_env_t *env, char *entry)
{
    if (!entry)
        return -1;
    if (env->n + 2 > env->cap) {
        size_t cap = env->cap ? 2 * env->cap : 64;
        char **grown = realloc(env->v, cap * sizeof *grown);
        if (!grown) {
            free(entry);
            return -1;
        }
        env->v = grown;
        env->cap = cap;
    }
    env->v[env->n++] = entry;
    env->v[env->n] = NULL;
    return 0;
}

/* "KEY=A" or, with b, "KEY=A:B". */
static char *s_assign(const char *key, const char *a, const char *b)
{
    size_t len = strlen(key) + strlen(a) + (b ? strlen(b) + 1 : 0) + 2;
    char *out = malloc(len);
    if (out)
        snprintf(out, len, "%s=%s%s%s", key, a, b ? ":" : "", b ? b : "");
    return out;
}

/* Whether entry ("KEY=...") sets one of the variables the agent sets. */
static bool s_overridden(const char *entry, const char *assignment_env)
{
    size_t klen = strcspn(entry, "=");
    static const char *const ours[] = { "LD_PRELOAD", RDZV_AGENT_SOCKET_ENV,
                                        RDZV_PORT_RANGE_ENV };
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (strlen(ours[i]) == klen && strncmp(entry, ours[i], klen) == 0)
            return true;
    for (const char *line = assignment_env; *line;) {
        size_t llen = strcspn(line, "\n");
        if (llen > klen && line[klen] == '=' && strncmp(line, entry, klen) == 0)
            return true;
        line += llen + (line[llen] == '\n');
    }
    return false;
}

/* Each KEY=VALUE line as an environ entry, the shell quoting removed. */
static int s_push_assignment(s_env_t *env, const char *assignment_env)
{
    for (const char *line = assignment_env; *line;) {
        size_t llen = strcspn(line, "\n");
        char *entry = strndup(line, llen), *key, *value;
        if (!entry)
            return -1;
        if (rdzv_env_split(entry, &key, &value)) {
            value[-1] = '=';            /* the value is unquoted in place after it */
            if (s_push(env, entry) < 0)
                return -1;
        } else {
            free(entry);
        }
        line += llen + (line[llen] == '\n');
    }
    return 0;
}

char **rdzv_agent_child_environ(const rdzv_agent_child_env_t *spec)
{
    s_env_t env = { 0 };
    for (char **e = environ; *e; e++)
        if (!s_overridden(*e, spec->assignment_env) && s_push(&env, strdup(*e)) < 0)
            goto fail;
    const char *old = getenv("LD_PRELOAD");
    char range[32];
    snprintf(range, sizeof range, "%d-%d", spec->range_base, spec->range_limit);
    if (s_push_assignment(&env, spec->assignment_env) < 0
        || s_push(&env, s_assign("LD_PRELOAD", spec->shim_path, old && *old ? old : NULL)) < 0
        || s_push(&env, s_assign(RDZV_AGENT_SOCKET_ENV, spec->socket_path, NULL)) < 0
        || s_push(&env, s_assign(RDZV_PORT_RANGE_ENV, range, NULL)) < 0)
        goto fail;
    return env.v;
fail:
    rdzv_agent_child_environ_free(&env.v);
    return NULL;
}

void rdzv_agent_child_environ_free(char ***env_p)
{
    if (!env_p || !*env_p)
        return;
    for (char **e = *env_p; *e; e++)
        free(*e);
    free(*env_p);
    *env_p = NULL;
}

/* CMD must not outlive the agent, even one killed by SIGKILL: its
 * listeners were handed over by the agent, and a new agent would find them
 * on the plan's ports. SIGTERM, not SIGKILL: CMD can still stop its own
 * children, which the death signal does not reach. The kernel sends it when
 * the thread that forked ends; the agent forks only on its main thread. */
static void s_die_with(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(RDZV_AGENT_CHILD_ORPHANED);  /* the agent died before prctl */
}

pid_t rdzv_agent_child_spawn(char **cmd, char **env)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    s_die_with(parent);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(cmd[0], cmd, env);
    int e = errno;
    fprintf(stderr, "rdzv agent: cannot run %s: %s\n", cmd[0], strerror(e));
    /* The shell's convention, as rdzv join: 127 not found, 126 not runnable. */
    _exit(e == ENOENT ? 127 : 126);
}
