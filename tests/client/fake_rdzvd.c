/* A stand-in for rdzvd for the CLI tests: answers each request at once
 * with a fixed, valid reply. Group "refuse" is refused (world_mismatch),
 * group "silent" is never answered, key "missing" is not_found. Hostile
 * groups answer what no rdzvd sends: "garbage" (not JSON), "array" (a JSON
 * array), "multipart" (two frames), "wrongid" (another request's id), "v2"
 * (protocol version 2), "huge" (an error message of 500 KB); key "nul" has
 * a value holding \u0000. Exits after 20 s without requests. Usage:
 * fake_rdzvd ENDPOINT */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define S_HUGE_MESSAGE (500 * 1024)

#define S_IDLE_MS 20000

static void s_send(void *router, zmq_msg_t *ident, double id, const char *body)
{
    char frame[8192];
    int n = snprintf(frame, sizeof frame, "{\"v\":1,\"id\":%.0f,%s}", id, body);
    zmq_msg_send(ident, router, ZMQ_SNDMORE);
    zmq_send(router, frame, (size_t) n, 0);
}

/* Each rank's plan is 4 ports from 20000 + 4 * rank, all ranks on node
 * "n"; rank 0 is the master, with the store and DP RPC ports. */
static void s_join_body(const cJSON *req, char *out, size_t len)
{
    int world = cJSON_GetObjectItem(req, "world")->valueint;
    int rank = cJSON_GetObjectItem(req, "rank")->valueint;
    const char *host = cJSON_GetObjectItem(req, "host")->valuestring;
    int n = snprintf(out, len, "\"ok\":true,\"assignment\":{\"group\":\"%s\",\"epoch\":1,"
                     "\"rank\":%d,\"world\":%d,\"master_addr\":\"%s\",\"master_port\":20000,"
                     "\"local_rank\":%d,\"local_world\":%d,\"group_rank\":0,\"group_world\":1,"
                     "\"named_ports\":{\"store\":20000,\"dp_rpc\":20001,\"probe\":[%d,%d]},"
                     "\"ports\":[%d,%d,%d,%d],\"nccl_unique_id\":null,\"members\":[",
                     cJSON_GetObjectItem(req, "group")->valuestring, rank, world, host,
                     rank, world, 20002 + 4 * rank, 20003 + 4 * rank,
                     20000 + 4 * rank, 20001 + 4 * rank, 20002 + 4 * rank, 20003 + 4 * rank);
    for (int r = 0; r < world && (size_t) n < len; r++)
        n += snprintf(out + n, len - (size_t) n, "%s{\"rank\":%d,\"host\":\"%s\",\"node\":\"n\"}",
                      r ? "," : "", r, host);
    snprintf(out + n, len - (size_t) n, "]}");
}

/* The hostile groups' answers; false for any other group. */
static bool s_hostile(void *router, zmq_msg_t *ident, double id, const char *group)
{
    char frame[256];
    if (strcmp(group, "garbage") == 0)
        snprintf(frame, sizeof frame, "<html>not rdzvd</html>");
    else if (strcmp(group, "array") == 0)
        snprintf(frame, sizeof frame, "[1,%.0f]", id);
    else if (strcmp(group, "wrongid") == 0)
        snprintf(frame, sizeof frame, "{\"v\":1,\"id\":%.0f,\"ok\":true}", id + 1000);
    else if (strcmp(group, "v2") == 0)
        snprintf(frame, sizeof frame, "{\"v\":2,\"id\":%.0f,\"ok\":true,\"groups\":[]}", id);
    else if (strcmp(group, "multipart") == 0) {
        snprintf(frame, sizeof frame, "{\"v\":1,\"id\":%.0f,\"ok\":true,\"groups\":[]}", id);
        zmq_msg_send(ident, router, ZMQ_SNDMORE);
        zmq_send(router, frame, strlen(frame), ZMQ_SNDMORE);
        zmq_send(router, "more", 4, 0);
        return true;
    } else if (strcmp(group, "huge") == 0) {
        size_t n = S_HUGE_MESSAGE + 128;
        char *big = malloc(n);
        int len = snprintf(big, n, "{\"v\":1,\"id\":%.0f,\"error\":{\"code\":\"bad_request\","
                           "\"message\":\"", id);
        memset(big + len, 'x', S_HUGE_MESSAGE);
        len += S_HUGE_MESSAGE;
        len += snprintf(big + len, n - (size_t) len, "\"}}");
        zmq_msg_send(ident, router, ZMQ_SNDMORE);
        zmq_send(router, big, (size_t) len, 0);
        free(big);
        return true;
    } else
        return false;
    zmq_msg_send(ident, router, ZMQ_SNDMORE);
    zmq_send(router, frame, strlen(frame), 0);
    return true;
}

static void s_answer(void *router, zmq_msg_t *ident, const cJSON *req)
{
    double id = cJSON_GetObjectItem(req, "id")->valuedouble;
    const char *op = cJSON_GetObjectItem(req, "op")->valuestring;
    const cJSON *g = cJSON_GetObjectItem(req, "group");
    const char *group = cJSON_IsString(g) ? g->valuestring : "";
    const cJSON *k = cJSON_GetObjectItem(req, "key");
    char body[4096];
    if (strcmp(group, "silent") == 0 || s_hostile(router, ident, id, group))
        return;
    if (strcmp(group, "refuse") == 0)
        s_send(router, ident, id, "\"error\":{\"code\":\"world_mismatch\","
                                  "\"message\":\"group refuse has world 4, not 2\"}");
    else if (cJSON_IsString(k) && strcmp(k->valuestring, "nul") == 0)
        s_send(router, ident, id, "\"ok\":true,\"value\":\"ab\\u0000cd\"");
    else if (cJSON_IsString(k) && strcmp(k->valuestring, "missing") == 0)
        s_send(router, ident, id, "\"error\":{\"code\":\"not_found\",\"message\":\"no key\"}");
    else if (strcmp(op, "join") == 0) {
        s_join_body(req, body, sizeof body);
        s_send(router, ident, id, body);
    } else if (strcmp(op, "kv_get") == 0 || strcmp(op, "kv_wait") == 0)
        s_send(router, ident, id, "\"ok\":true,\"value\":\"the value\"");
    else if (strcmp(op, "status") == 0)
        s_send(router, ident, id, "\"ok\":true,\"groups\":[]");
    else
        s_send(router, ident, id, "\"ok\":true");
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    if (zmq_bind(router, argv[1]) != 0) {
        fprintf(stderr, "fake_rdzvd: bind %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return 1;
    }
    for (;;) {
        zmq_pollitem_t item = { router, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&item, 1, S_IDLE_MS) <= 0)
            break;
        zmq_msg_t ident;
        char buf[8192];
        zmq_msg_init(&ident);
        zmq_msg_recv(&ident, router, 0);
        int n = zmq_recv(router, buf, sizeof buf - 1, 0);
        buf[n < 0 ? 0 : n] = '\0';
        cJSON *req = cJSON_Parse(buf);
        if (req)
            s_answer(router, &ident, req);
        cJSON_Delete(req);
        zmq_msg_close(&ident);
    }
    zmq_close(router);
    zmq_ctx_term(ctx);
    return 0;
}
