/* Why a request frame is not a JSON object, in words a client can act on:
 * cJSON only says where it stopped. */
#ifndef RDZV_PROTO_JSON_H
#define RDZV_PROTO_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Writes into msg why frame[0..len) did not parse as a JSON object; root is
 * what cJSON made of it (NULL if it failed) and stop where it stopped. */
void rdzv_json_why(const char *frame, size_t len, const cJSON *root, const char *stop,
                   char *msg, size_t msglen);

#endif
