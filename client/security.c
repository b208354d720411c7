#include "security.h"
#include "curve_cert.h"
#include "rdzv_util.h"
#include "rdzv_private.h"

#include <czmq.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct rdzv_security {
    bool curve;
    char server_public[RDZV_Z85_KEY_LEN + 1];
    char public[RDZV_Z85_KEY_LEN + 1];
    char secret[RDZV_Z85_KEY_LEN + 1];
    char *token;
};

static int s_curve(rdzv_security_t *self, const char *server_file, const char *secret_file,
                   char *err, size_t errlen)
{
    if (!secret_file) {
        rdzv_set_error(err, errlen, "RDZV_CURVE_SECRET: not set, although "
                       "RDZV_CURVE_SERVER_PUBLIC is (CURVE needs this client's secret key)");
        return -1;
    }
    char why[256];
    if (rdzv_curve_cert_load(server_file, self->server_public, NULL, why, sizeof why) < 0) {
        rdzv_set_error(err, errlen, "RDZV_CURVE_SERVER_PUBLIC: cannot load the server "
                       "certificate %s: %s", server_file, why);
        return -1;
    }
    if (rdzv_curve_cert_load(secret_file, self->public, self->secret, why, sizeof why) < 0) {
        rdzv_set_error(err, errlen, "RDZV_CURVE_SECRET: cannot load a secret key from %s: %s",
                       secret_file, why);
        return -1;
    }
    self->curve = true;
    return 0;
}

rdzv_security_t *rdzv_security_new(char *err, size_t errlen)
{
    rdzv_security_t *self = calloc(1, sizeof *self);
    if (!self) {
        rdzv_set_error(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    const char *server = getenv("RDZV_CURVE_SERVER_PUBLIC");
    const char *secret = getenv("RDZV_CURVE_SECRET");
    const char *token = getenv("RDZV_GROUP_TOKEN");
    int rc = server && *server ? s_curve(self, server, secret, err, errlen) : 0;
    if (rc == 0 && token && *token && !(self->token = rdzv_read_token_file(token))) {
        rdzv_set_error(err, errlen, "RDZV_GROUP_TOKEN: cannot read a token from %s", token);
        rc = -1;
    }
    if (rc < 0) {
        rdzv_security_destroy(&self);
        errno = EACCES;
    }
    return self;
}

void rdzv_security_destroy(rdzv_security_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rdzv_security_t *self = *self_p;
    free(self->token);
    /* The secret key stays no longer in memory than the client. */
    memset(self->secret, 0, sizeof self->secret);
    free(self);
    *self_p = NULL;
}

int rdzv_security_apply(const rdzv_security_t *self, void *sock, char *err, size_t errlen)
{
    if (!self->curve)
        return 0;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, self->server_public, RDZV_Z85_KEY_LEN) != 0
        || zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, self->public, RDZV_Z85_KEY_LEN) != 0
        || zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, self->secret, RDZV_Z85_KEY_LEN) != 0) {
        rdzv_set_error(err, errlen, "libzmq refused the CURVE keys: %s",
                       zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

const char *rdzv_security_token(const rdzv_security_t *self)
{
    return self->token;
}
