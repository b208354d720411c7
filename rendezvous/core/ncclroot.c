#include "ncclroot.h"
#include "rdzv_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_START_TIMEOUT_MS 10000

extern char **environ;

struct rdzv_ncclroot {
    pid_t pid;
    int to_helper;               /* its stdin: closing it ends the helper */
    int from_helper;             /* its stdout: the ID, then "done" or "timeout" */
};

static int s_read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t len = 0;
    while (len + 1 < cap) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int rc = poll(&p, 1, timeout_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        ssize_t n = read(fd, buf + len, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        if (buf[len] == '\n') {
            buf[len] = '\0';
            return (int) len;
        }
        len++;
    }
    return -1;
}

static pid_t s_spawn(const char *helper, int timeout_s, int count, int in_fd, int out_fd)
{
    char timeout[32], ids[32];
    snprintf(timeout, sizeof timeout, "%d", timeout_s);
    snprintf(ids, sizeof ids, "%d", count);
    char *argv[] = { (char *) helper, timeout, ids, NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    pid_t pid = -1;
    if (posix_spawn(&pid, helper, &fa, NULL, argv, environ) != 0)
        pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

rdzv_ncclroot_t *rdzv_ncclroot_start(const char *helper, int timeout_s, int count,
                                     cJSON *ids, char *err, size_t errlen)
{
    int in[2], out[2];
    if (!helper) {
        snprintf(err, errlen, "rdzvd was built without NCCL");
        return NULL;
    }
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return NULL;
    }
    pid_t pid = s_spawn(helper, timeout_s, count, in[0], out[1]);
    close(in[0]);
    close(out[1]);
    rdzv_ncclroot_t *self = calloc(1, sizeof *self);
    if (!self || pid < 0) {
        snprintf(err, errlen, "cannot start %s", helper);
        goto fail;
    }
    *self = (rdzv_ncclroot_t) { .pid = pid, .to_helper = in[1], .from_helper = out[0] };
    for (int i = 0; i < count; i++) {
        char line[RDZV_NCCL_ID_HEX + 64];
        int n = s_read_line(out[0], line, sizeof line, S_START_TIMEOUT_MS);
        if (n != RDZV_NCCL_ID_HEX) {
            snprintf(err, errlen, "%s gave no ID: %s", helper, n > 0 ? line : "no output");
            rdzv_ncclroot_destroy(&self);
            return NULL;
        }
        cJSON_AddItemToArray(ids, cJSON_CreateString(line));
    }
    fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    return self;
fail:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(in[1]);
    close(out[0]);
    free(self);
    return NULL;
}

void rdzv_ncclroot_destroy(rdzv_ncclroot_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_ncclroot_t *self = *self_p;
    close(self->to_helper);
    close(self->from_helper);
    /* The root thread may sit in accept(); only the process's end stops it. */
    kill(self->pid, SIGKILL);
    while (waitpid(self->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    free(self);
    *self_p = NULL;
}

int rdzv_ncclroot_fd(const rdzv_ncclroot_t *self)
{
    return self->from_helper;
}

pid_t rdzv_ncclroot_pid(const rdzv_ncclroot_t *self)
{
    return self->pid;
}

int rdzv_ncclroot_poll(rdzv_ncclroot_t *self)
{
    char buf[64];
    ssize_t n = read(self->from_helper, buf, sizeof buf - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (strstr(buf, "timeout"))
        return 1;
    return strstr(buf, "done") ? 0 : -1;
}
