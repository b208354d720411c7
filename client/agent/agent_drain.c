#include "agent_drain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

struct rdzv_agent_drain_watch {
    int fd;
    char *path;
};

rdzv_agent_drain_watch_t *rdzv_agent_drain_watch_new(const char *socket_path, char *err,
                                                     size_t errlen)
{
    rdzv_agent_drain_watch_t *self = calloc(1, sizeof *self);
    size_t len = strlen(socket_path) + sizeof RDZV_AGENT_DRAIN_SUFFIX;
    char *dir = strdup(socket_path);
    if (!self || !dir || !(self->path = malloc(len))) {
        snprintf(err, errlen, "out of memory");
        free(dir);
        rdzv_agent_drain_watch_destroy(&self);
        return NULL;
    }
    snprintf(self->path, len, "%s%s", socket_path, RDZV_AGENT_DRAIN_SUFFIX);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    unlink(self->path);
    self->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (self->fd < 0 || inotify_add_watch(self->fd, dir, IN_CREATE | IN_MOVED_TO) < 0) {
        snprintf(err, errlen, "cannot watch %s for %s: %s", dir, self->path, strerror(errno));
        free(dir);
        rdzv_agent_drain_watch_destroy(&self);
        return NULL;
    }
    free(dir);
    return self;
}

void rdzv_agent_drain_watch_destroy(rdzv_agent_drain_watch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_agent_drain_watch_t *self = *self_p;
    if (self->fd > 0)
        close(self->fd);
    free(self->path);
    free(self);
    *self_p = NULL;
}

int rdzv_agent_drain_watch_fd(const rdzv_agent_drain_watch_t *self)
{
    return self->fd;
}

bool rdzv_agent_drain_watch_asked(rdzv_agent_drain_watch_t *self)
{
    /* The events say only that something came; the file says whether it
     * was this one. */
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    while (read(self->fd, buf, sizeof buf) > 0)
        ;
    return access(self->path, F_OK) == 0;
}

void rdzv_agent_drain_watch_done(rdzv_agent_drain_watch_t *self)
{
    unlink(self->path);
}
