/* Who may talk to rdzvd, client side: CURVE keys and the group token, read
 * from the environment so that every user of librdzv (the CLI, the agent,
 * an engine through ctypes) gets them the same way:
 *   RDZV_CURVE_SERVER_PUBLIC  path of rdzvd's public certificate
 *   RDZV_CURVE_SECRET         path of this client's secret certificate
 *   RDZV_GROUP_TOKEN          path of a file holding the group token */
#ifndef RDZV_SECURITY_H
#define RDZV_SECURITY_H

#include <stddef.h>

/* Applies CURVE to a DEALER socket before it connects, when configured, and
 * reads the token (*token_out: malloc'd or NULL). 0, or -1 with err set;
 * err starts with the variable to fix ("RDZV_CURVE_SECRET: ...") when one
 * is to blame. */
int rdzv_security_configure(void *sock, char **token_out, char *err, size_t errlen);

#endif
