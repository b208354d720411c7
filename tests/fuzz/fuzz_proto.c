/* libFuzzer harness: request decoding (rendezvous/core/proto.c). Any frame must
 * either parse into a request whose fields obey docs/protocol.md or fail
 * with an error code; the error reply must be valid JSON. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "reply.h"
#include "rdzv_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rdzv_request_t req;
    memset(&req, 0, sizeof req);
    const char *code = NULL;
    char msg[256] = "";
    int rc = rdzv_request_parse((const char *) data, size, 1024, &req, &code, msg, sizeof msg);
    if (rc == 0) {
        /* Accepted: the invariants the handlers rely on. */
        if (req.group && (strlen(req.group) == 0 || strlen(req.group) > RDZV_MAX_NAME))
            abort();
        if (req.op == RDZV_OP_JOIN && (req.world < 1 || req.world > 1024 || req.rank < 0
                                       || req.rank >= req.world))
            abort();
        if (req.value && strlen(req.value) > RDZV_MAX_VALUE)
            abort();
        rdzv_request_clear(&req);
    } else {
        if (!code || strlen(msg) >= sizeof msg)
            abort();
        char *text = rdzv_reply_error(req.id, code, msg);
        if (text) {
            cJSON *back = cJSON_Parse(text);
            if (!back)
                abort();                 /* an error reply that is not JSON */
            cJSON_Delete(back);
            free(text);
        }
        rdzv_request_clear(&req);
    }
    return 0;
}
