/* Who may talk to rdzvd, client side: CURVE keys and the group token, read
 * from the environment so that every user of librdzv (the CLI, the agent,
 * an engine through ctypes) gets them the same way:
 *   RDZV_CURVE_SERVER_PUBLIC  path of rdzvd's public certificate
 *   RDZV_CURVE_SECRET         path of this client's secret certificate
 *   RDZV_GROUP_TOKEN          path of a file holding the group token
 * They are read once per client and applied to the socket of every server
 * it talks to, so all servers of a list share one server key. */
#ifndef RDZV_SECURITY_H
#define RDZV_SECURITY_H

#include <stddef.h>

typedef struct rdzv_security rdzv_security_t;

/* Reads the files the environment names (none: no CURVE, no token). NULL
 * with err set and errno EACCES when one cannot be used (err then starts
 * with the variable to fix: "RDZV_CURVE_SECRET: ..."), or ENOMEM. */
rdzv_security_t *rdzv_security_new(char *err, size_t errlen);
void rdzv_security_destroy(rdzv_security_t **self_p);
/* Puts the CURVE keys, if any, on a DEALER before it connects: 0, or -1
 * with err set when libzmq refuses them. */
int rdzv_security_apply(const rdzv_security_t *self, void *sock, char *err, size_t errlen);
/* The token sent with every request; NULL without one. Owned by self. */
const char *rdzv_security_token(const rdzv_security_t *self);

#endif
