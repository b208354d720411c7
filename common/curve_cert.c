/* CURVE certificates' keys (curve_cert.h). */
#include "curve_cert.h"

#include <czmq.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

/* A certificate rdzv keygen writes is under 1 KiB; more is not one. */
#define S_MAX_CERT_BYTES 65536

/* Copies the Z85 key at name in root to out; false if there is none. */
static bool s_key(zconfig_t *root, const char *name, char out[RDZV_Z85_KEY_LEN + 1])
{
    const char *text = root ? zconfig_get(root, name, NULL) : NULL;
    uint8_t key[32];
    if (!text || strlen(text) != RDZV_Z85_KEY_LEN || !zmq_z85_decode(key, text))
        return false;
    memcpy(out, text, RDZV_Z85_KEY_LEN + 1);
    return true;
}

const char *rdzv_curve_cert_read(const char *path, char public_z85[RDZV_Z85_KEY_LEN + 1],
                                 char *secret_z85)
{
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return "not a regular file";
    zchunk_t *chunk = zchunk_slurp(path, S_MAX_CERT_BYTES);
    zconfig_t *root = chunk ? zconfig_chunk_load(chunk) : NULL;
    zchunk_destroy(&chunk);
    const char *why = NULL;
    if (!s_key(root, "/curve/public-key", public_z85))
        why = "no curve/public-key of 40 Z85 characters (make one with rdzv keygen)";
    else if (secret_z85 && !s_key(root, "/curve/secret-key", secret_z85))
        why = "no curve/secret-key of 40 Z85 characters (the _secret file rdzv keygen writes)";
    zconfig_destroy(&root);
    return why;
}
