/* The accepted CURVE client keys of --clients DIR (clientkeys.h). */
#include "clientkeys.h"
#include "curve_cert.h"
#include "log.h"

#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_SECRET_SUFFIX "_secret"

struct rdzv_clientkeys {
    char *dir;
    zhashx_t *keys;              /* Z85 public key -> the file's name in dir */
    uint64_t signature;          /* of the entries as last read (s_signature) */
    bool read_once;              /* keys holds a read of dir */
    bool unlisted;               /* the last check could not list dir (logged once) */
};

/* Names that may hold a key: not hidden, not a secret certificate. */
static int s_visible(const struct dirent *e)
{
    size_t n = strlen(e->d_name), k = strlen(S_SECRET_SUFFIX);
    return e->d_name[0] != '.' && !(n >= k && strcmp(e->d_name + n - k, S_SECRET_SUFFIX) == 0);
}

/* FNV-1a: the signature only has to differ when an entry does. */
static uint64_t s_mix(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* One entry's part: its name and what stat, through links, says of it;
 * an entry that cannot be stat'ed counts by its name alone. */
static uint64_t s_mix_entry(uint64_t h, const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    h = s_mix(h, name, strlen(name) + 1);
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int) sizeof path || stat(path, &st) < 0)
        return h;
    int64_t parts[] = { (int64_t) st.st_dev, (int64_t) st.st_ino, (int64_t) st.st_mode,
                        (int64_t) st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                        st.st_ctim.tv_sec, st.st_ctim.tv_nsec };
    return s_mix(h, parts, sizeof parts);
}

static void s_free_list(struct dirent **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* dir's visible entries in name order; -1 with errno if dir cannot be listed. */
static int s_list(const char *dir, struct dirent ***list)
{
    return scandir(dir, list, s_visible, alphasort);
}

static int s_signature(const char *dir, uint64_t *out)
{
    struct dirent **list = NULL;
    int n = s_list(dir, &list);
    if (n < 0)
        return -1;
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < n; i++)
        h = s_mix_entry(h, dir, list[i]->d_name);
    s_free_list(list, n);
    *out = h;
    return 0;
}

/* dir's keys as a fresh table, each skipped file logged; NULL if dir
 * cannot be listed. */
static zhashx_t *s_read(const char *dir)
{
    struct dirent **list = NULL;
    int n = s_list(dir, &list);
    zhashx_t *keys = n >= 0 ? zhashx_new() : NULL;
    if (!keys) {
        if (n >= 0)
            s_free_list(list, n);
        return NULL;
    }
    zhashx_set_destructor(keys, (zhashx_destructor_fn *) zstr_free);
    zhashx_set_duplicator(keys, (zhashx_duplicator_fn *) strdup);
    for (int i = 0; i < n; i++) {
        char path[4096], z85[RDZV_Z85_KEY_LEN + 1], why[256];
        const char *name = list[i]->d_name;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (rdzv_curve_cert_read(path, z85, NULL, why, sizeof why) < 0)
            rdzv_core_log("clients", "skipped file=%s dir=%s reason=\"%s\"", name, dir, why);
        else
            zhashx_insert(keys, z85, (void *) name);   /* a repeated key keeps its first file */
    }
    s_free_list(list, n);
    return keys;
}

static int s_count_missing(zhashx_t *from, zhashx_t *in)
{
    int n = 0;
    for (void *v = zhashx_first(from); v; v = zhashx_next(from))
        n += zhashx_lookup(in, zhashx_cursor(from)) == NULL;
    return n;
}

/* Takes keys as the accepted set; after the first read, says how it
 * differs from the last (the start line gives the first count). */
static void s_replace(rdzv_clientkeys_t *self, zhashx_t *keys)
{
    int added = s_count_missing(keys, self->keys), removed = s_count_missing(self->keys, keys);
    if (self->read_once && (added || removed))
        rdzv_core_log("clients", "keys=%d added=%d removed=%d dir=%s", (int) zhashx_size(keys),
                      added, removed, self->dir);
    zhashx_destroy(&self->keys);
    self->keys = keys;
    self->read_once = true;
}

int rdzv_clientkeys_refresh(rdzv_clientkeys_t *self)
{
    uint64_t signature = 0;
    int rc = s_signature(self->dir, &signature);
    if (rc == 0 && self->read_once && signature == self->signature)
        return 0;
    zhashx_t *keys = rc == 0 ? s_read(self->dir) : NULL;
    if (!keys) {
        int saved = errno;
        if (!self->unlisted)
            rdzv_core_log("clients", "cannot list dir=%s (%s); keeping its %d keys", self->dir,
                          strerror(saved), (int) zhashx_size(self->keys));
        self->unlisted = true;
        errno = saved;
        return -1;
    }
    self->unlisted = false;
    self->signature = signature;
    s_replace(self, keys);
    return 1;
}

rdzv_clientkeys_t *rdzv_clientkeys_new(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--clients %s is not a directory", dir);
        return NULL;
    }
    rdzv_clientkeys_t *self = calloc(1, sizeof *self);
    if (!self || !(self->dir = strdup(dir)) || !(self->keys = zhashx_new())) {
        rdzv_clientkeys_destroy(&self);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (rdzv_clientkeys_refresh(self) < 0) {
        snprintf(err, errlen, "cannot list --clients %s: %s", dir, strerror(errno));
        rdzv_clientkeys_destroy(&self);
    }
    return self;
}

void rdzv_clientkeys_destroy(rdzv_clientkeys_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->keys);
    free((*self_p)->dir);
    free(*self_p);
    *self_p = NULL;
}

const char *rdzv_clientkeys_lookup(const rdzv_clientkeys_t *self,
                                   const uint8_t key[RDZV_CURVE_KEY_BYTES])
{
    char z85[RDZV_Z85_KEY_LEN + 1];
    if (!zmq_z85_encode(z85, key, RDZV_CURVE_KEY_BYTES))
        return NULL;
    return zhashx_lookup(self->keys, z85);
}

int rdzv_clientkeys_count(const rdzv_clientkeys_t *self)
{
    return (int) zhashx_size(self->keys);
}
