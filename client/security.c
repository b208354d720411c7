#include "security.h"
#include "rdzv_util.h"
#include "rdzv_private.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int s_curve(void *sock, const char *server_file, const char *secret_file,
                   char *err, size_t errlen)
{
    if (!secret_file) {
        rdzv_set_error(err, errlen, "RDZV_CURVE_SECRET: not set, although "
                       "RDZV_CURVE_SERVER_PUBLIC is (CURVE needs this client's secret key)");
        return -1;
    }
    zcert_t *server = zcert_load(server_file);
    zcert_t *mine = server ? zcert_load(secret_file) : NULL;
    int rc = -1;
    if (!server)
        rdzv_set_error(err, errlen, "RDZV_CURVE_SERVER_PUBLIC: cannot load the server "
                       "certificate %s", server_file);
    else if (!mine || strcmp(zcert_secret_txt(mine), "0000000000000000000000000000000000000000") == 0)
        rdzv_set_error(err, errlen, "RDZV_CURVE_SECRET: cannot load a secret key from %s",
                       secret_file);
    else if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, zcert_public_txt(server), 40) != 0
             || zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, zcert_public_txt(mine), 40) != 0
             || zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, zcert_secret_txt(mine), 40) != 0)
        rdzv_set_error(err, errlen, "libzmq refused the CURVE keys: %s",
                       zmq_strerror(zmq_errno()));
    else
        rc = 0;
    zcert_destroy(&server);
    zcert_destroy(&mine);
    return rc;
}

static char *s_read_token(const char *path, char *err, size_t errlen)
{
    char *token = rdzv_read_token_file(path);
    if (!token)
        rdzv_set_error(err, errlen, "RDZV_GROUP_TOKEN: cannot read a token from %s", path);
    return token;
}

int rdzv_security_configure(void *sock, char **token_out, char *err, size_t errlen)
{
    *token_out = NULL;
    const char *server = getenv("RDZV_CURVE_SERVER_PUBLIC");
    const char *secret = getenv("RDZV_CURVE_SECRET");
    const char *token = getenv("RDZV_GROUP_TOKEN");
    if (server && *server && s_curve(sock, server, secret, err, errlen) < 0)
        return -1;
    if (token && *token && !(*token_out = s_read_token(token, err, errlen)))
        return -1;
    return 0;
}
