#include "agent_files.h"
#include "agent_proto.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* PATH.env holds the NCCL IDs and the plan: the agent's and the allowed
 * uids' to read, nobody else's. As root the agent gives the file to the one
 * allowed uid; otherwise to an allowed uid's primary group if the agent may
 * (is in it), else the file keeps the agent's group, which the engine must
 * then share (a Pod's supplementalGroups). */
static void s_share_env_file(int fd, const rdzv_agent_env_file_t *spec)
{
    if (spec->n_allow_uids == 0) {
        fchmod(fd, 0600);
        return;
    }
    fchmod(fd, 0640);
    if (geteuid() == 0 && spec->n_allow_uids == 1
        && fchown(fd, spec->allow_uids[0], (gid_t) -1) == 0)
        return;
    for (size_t i = 0; i < spec->n_allow_uids; i++) {
        const struct passwd *pw = getpwuid(spec->allow_uids[i]);
        if (pw && fchown(fd, (uid_t) -1, pw->pw_gid) == 0)
            return;
    }
}

int rdzv_agent_env_file_write(const rdzv_agent_env_file_t *spec)
{
    size_t len = strlen(spec->path) + 16;
    char *tmp = malloc(len);
    if (!tmp)
        return -1;
    snprintf(tmp, len, "%s.%d.tmp", spec->path, (int) getpid());
    FILE *f = fopen(tmp, "w");
    int rc = -1;
    if (f) {
        s_share_env_file(fileno(f), spec);
        /* The range too: an engine that sources this file knows which
         * ports the shim must refuse should it not reach the agent. */
        bool ok = fputs(spec->text, f) >= 0
                  && fprintf(f, "%s=%d-%d\n", RDZV_PORT_RANGE_ENV, spec->range_base,
                             spec->range_limit) > 0;
        ok = (fclose(f) == 0) && ok;
        rc = ok && rename(tmp, spec->path) == 0 ? 0 : -1;
    }
    if (rc < 0) {
        fprintf(stderr, "rdzv agent: cannot write %s: %s\n", spec->path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}

void rdzv_agent_session_save(const char *path, const char *session)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fchmod(fileno(f), 0600) == 0 && fputs(session, f) >= 0;
    ok = (f && fclose(f) == 0) && ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
}

bool rdzv_agent_session_load(const char *path, char *session, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(session, 1, size - 1, f) : 0;
    if (f)
        fclose(f);
    session[n] = '\0';
    return n == size - 1 && strspn(session, "0123456789abcdef") == n;
}

char *rdzv_agent_beside_socket(const char *socket_path, const char *suffix)
{
    size_t len = strlen(socket_path) + strlen(suffix) + 1;
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%s%s", socket_path, suffix);
    return path;
}

/* The socket, PATH.env and PATH.session go into --socket's directory: find
 * out before joining, or the group would wait for a rank whose agent can
 * never serve. */
int rdzv_agent_check_socket_dir(const char *socket_path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(socket_path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == socket_path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int) (slash - socket_path), socket_path);
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "rdzv agent: --socket %s: directory %s does not exist (create it, or "
                "mount an emptyDir there)\n", socket_path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) < 0) {
        fprintf(stderr, "rdzv agent: --socket %s: directory %s is not writable by uid %d: "
                "%s\n", socket_path, dir, (int) geteuid(), strerror(errno));
        return -1;
    }
    return 0;
}
