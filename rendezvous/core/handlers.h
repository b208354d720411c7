/* The protocol's operations, one handler each (handlers.c). */
#ifndef RDZV_HANDLERS_H
#define RDZV_HANDLERS_H

#include "batch.h"
#include "proto.h"

/* Handles one parsed, admitted request; its replies go to the batch. */
void rdzv_handle_request(rdzv_batch_t *self, const rdzv_peer_t *peer, const rdzv_request_t *req);

#endif
