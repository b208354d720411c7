#include "tokens.h"
#include "rdzv_util.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char *token;
    struct timespec mtime;
    off_t size;
} s_entry_t;

struct rdzv_tokens {
    char *dir;
    zhashx_t *cache;             /* group -> s_entry_t */
};

static void s_entry_free(void **item)
{
    s_entry_t *e = *item;
    if (e) {
        if (e->token)
            memset(e->token, 0, strlen(e->token));
        free(e->token);
        free(e);
        *item = NULL;
    }
}

rdzv_tokens_t *rdzv_tokens_new(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--tokens %s is not a directory", dir);
        return NULL;
    }
    rdzv_tokens_t *self = calloc(1, sizeof *self);
    if (!self || !(self->dir = strdup(dir)) || !(self->cache = zhashx_new())) {
        rdzv_tokens_destroy(&self);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    zhashx_set_destructor(self->cache, s_entry_free);
    return self;
}

void rdzv_tokens_destroy(rdzv_tokens_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->cache);
    free((*self_p)->dir);
    free(*self_p);
    *self_p = NULL;
}

/* A group name may hold '/': it names a file in a subdirectory, never one
 * outside the directory. */
static bool s_plain_path(const char *name)
{
    const char *p = name;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
        if (!*p && p[-1] == '/')
            return false;
    }
    return *name != '\0';
}

/* The group's token, read again when its file changed; NULL if none. */
static const char *s_token(rdzv_tokens_t *self, const char *group)
{
    char path[4096];
    struct stat st;
    if (!s_plain_path(group)
        || snprintf(path, sizeof path, "%s/%s", self->dir, group) >= (int) sizeof path
        || stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
        zhashx_delete(self->cache, group);
        return NULL;
    }
    s_entry_t *e = zhashx_lookup(self->cache, group);
    if (e && e->size == st.st_size && e->mtime.tv_sec == st.st_mtim.tv_sec
        && e->mtime.tv_nsec == st.st_mtim.tv_nsec)
        return e->token;
    e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    *e = (s_entry_t) { .token = rdzv_read_token_file(path), .mtime = st.st_mtim, .size = st.st_size };
    zhashx_update(self->cache, group, e);
    return e->token;
}

bool rdzv_tokens_allow(rdzv_tokens_t *self, const char *group, const char *token)
{
    const char *want = group ? s_token(self, group) : NULL;
    return want && token && rdzv_secret_equal(want, token);
}
