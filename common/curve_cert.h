/* The keys of a CURVE certificate as `rdzv keygen` (czmq's zcert_save)
 * writes it, read for librdzv (--curve-server-public, --curve-secret) and
 * rdzvd (--curve-secret, --clients DIR). Not zcert_load: on a file that
 * does not parse, czmq's zconfig_load leaks the file handle it opened,
 * and a --clients DIR may hold any file. */
#ifndef RDZV_CURVE_CERT_H
#define RDZV_CURVE_CERT_H

#include <stddef.h>

/* A key in Z85, without its NUL. */
#define RDZV_Z85_KEY_LEN 40

/* Reads path's curve/public-key into public_z85 and, unless secret_z85 is
 * NULL, its curve/secret-key into secret_z85 (each NUL-terminated, room
 * for RDZV_Z85_KEY_LEN + 1). 0 if both are there, 40 Z85 characters each;
 * else -1 and why in why. Whatever does not parse, czmq also says on
 * stdout (zclock_log). */
int rdzv_curve_cert_read(const char *path, char *public_z85, char *secret_z85,
                         char *why, size_t whylen);

/* As rdzv_curve_cert_read, of "path_secret" if that is a file, else of
 * path: the two names zcert_load tried, so that either half of a
 * certificate pair names it. */
int rdzv_curve_cert_load(const char *path, char *public_z85, char *secret_z85,
                         char *why, size_t whylen);

#endif
