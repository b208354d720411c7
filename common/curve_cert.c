/* CURVE certificates' keys (curve_cert.h). */
#include "curve_cert.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A certificate rdzv keygen writes is under 1 KiB; more is not one. */
#define S_MAX_CERT_BYTES 65536

/* Copies the Z85 key at name in root to out; false if there is none. */
static bool s_key(zconfig_t *root, const char *name, char *out)
{
    const char *text = root ? zconfig_get(root, name, NULL) : NULL;
    uint8_t key[32];
    if (!text || strlen(text) != RDZV_Z85_KEY_LEN || !zmq_z85_decode(key, text))
        return false;
    memcpy(out, text, RDZV_Z85_KEY_LEN + 1);
    return true;
}

/* path's bytes (at most S_MAX_CERT_BYTES) as a chunk; NULL and why if it
 * is not a regular file that can be read whole. */
static zchunk_t *s_slurp(const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    zchunk_t *chunk = NULL;
    char *buf = NULL;
    ssize_t n = -1;
    if (!S_ISREG(st.st_mode))
        snprintf(why, whylen, "not a regular file");
    else if (st.st_size > S_MAX_CERT_BYTES)
        snprintf(why, whylen, "over %d bytes: not a certificate", S_MAX_CERT_BYTES);
    else if (!(buf = malloc((size_t) st.st_size + 1)))
        snprintf(why, whylen, "out of memory");
    else if ((n = read(fd, buf, (size_t) st.st_size + 1)) < 0)
        snprintf(why, whylen, "%s", strerror(errno));
    else if (!(chunk = zchunk_new(buf, (size_t) n)))
        snprintf(why, whylen, "out of memory");
    free(buf);
    close(fd);
    return chunk;
}

int rdzv_curve_cert_read(const char *path, char *public_z85, char *secret_z85,
                         char *why, size_t whylen)
{
    zchunk_t *chunk = s_slurp(path, why, whylen);
    if (!chunk)
        return -1;
    zconfig_t *root = zconfig_chunk_load(chunk);
    zchunk_destroy(&chunk);
    int rc = -1;
    if (!s_key(root, "/curve/public-key", public_z85))
        snprintf(why, whylen, "no curve/public-key of 40 Z85 characters (make one with rdzv "
                 "keygen)");
    else if (secret_z85 && !s_key(root, "/curve/secret-key", secret_z85))
        snprintf(why, whylen, "no curve/secret-key of 40 Z85 characters (the _secret file "
                 "rdzv keygen writes)");
    else
        rc = 0;
    zconfig_destroy(&root);
    return rc;
}

int rdzv_curve_cert_load(const char *path, char *public_z85, char *secret_z85,
                         char *why, size_t whylen)
{
    char secret_path[4096];
    struct stat st;
    if (snprintf(secret_path, sizeof secret_path, "%s_secret", path) < (int) sizeof secret_path
        && stat(secret_path, &st) == 0 && S_ISREG(st.st_mode))
        path = secret_path;
    return rdzv_curve_cert_read(path, public_z85, secret_z85, why, whylen);
}
