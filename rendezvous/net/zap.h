/* rdzvd's ZAP handler (ZeroMQ RFC 27): libzmq asks it, over
 * inproc://zeromq.zap.01, whether each CURVE handshake's client key may
 * in; it answers from --clients DIR (clientkeys.h), which it checks for
 * changes before each answer and once a second while idle, so that keys
 * added or removed take effect without a restart and the change is
 * logged when it happens. */
#ifndef RDZV_ZAP_H
#define RDZV_ZAP_H

#include "clientkeys.h"

#include <czmq.h>

/* Starts the handler on keys (taken); it must be up before any CURVE
 * socket binds, or a handshake would go unchecked. NULL if it cannot bind
 * the ZAP endpoint (keys is destroyed then). */
zactor_t *rdzv_zap_start(rdzv_clientkeys_t **keys_p);

#endif
