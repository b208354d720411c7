#include "nccl_id.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Offsets inside the 128 bytes; see the layout in nccl_id.h. */
#define S_OFF_MAGIC 0
#define S_OFF_FAMILY 8
#define S_OFF_PORT 10
#define S_OFF_IPV4 12
#define S_OFF_IPV6 16
#define S_OFF_SCOPE 32
#define S_OFF_NRANKS 36
#define S_END_2_21 36
#define S_END_2_29 40

static void s_problem(rdzv_nccl_id_info_t *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_problem(rdzv_nccl_id_info_t *out, const char *fmt, ...)
{
    if (out->problem[0])
        return;  /* the first problem found is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->problem, sizeof out->problem, fmt, ap);
    va_end(ap);
}

static size_t s_first_nonzero(const unsigned char *id, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (id[i])
            return i;
    return to;
}

/* Fills family, address, port and scope id; records a problem for a family
 * that is neither AF_INET nor AF_INET6. */
static void s_decode_address(const unsigned char *id, rdzv_nccl_id_info_t *out)
{
    uint16_t family, port_be;
    memcpy(&family, id + S_OFF_FAMILY, sizeof family);
    memcpy(&port_be, id + S_OFF_PORT, sizeof port_be);
    out->family = family;
    out->port = ntohs(port_be);

    if (family == AF_INET) {
        inet_ntop(AF_INET, id + S_OFF_IPV4, out->address, sizeof out->address);
    } else if (family == AF_INET6) {
        char text[INET6_ADDRSTRLEN];
        memcpy(&out->scope_id, id + S_OFF_SCOPE, sizeof out->scope_id);
        inet_ntop(AF_INET6, id + S_OFF_IPV6, text, sizeof text);
        if (out->scope_id)
            snprintf(out->address, sizeof out->address, "%s%%%u", text,
                     (unsigned) out->scope_id);
        else
            snprintf(out->address, sizeof out->address, "%s", text);
    } else {
        out->port = 0;
        s_problem(out, "unknown address family %u", (unsigned) family);
    }
}

int rdzv_nccl_id_decode(const unsigned char id[RDZV_NCCL_ID_BYTES],
                        rdzv_nccl_id_info_t *out, int layout)
{
    if (!id || !out || layout < RDZV_NCCL_LAYOUT_AUTO ||
        layout > RDZV_NCCL_LAYOUT_2_29) {
        errno = EINVAL;
        return -1;
    }
    memset(out, 0, sizeof *out);
    memcpy(&out->magic, id + S_OFF_MAGIC, sizeof out->magic);

    int32_t n_ranks;
    memcpy(&n_ranks, id + S_OFF_NRANKS, sizeof n_ranks);
    if (layout == RDZV_NCCL_LAYOUT_AUTO)
        layout = n_ranks ? RDZV_NCCL_LAYOUT_2_29 : RDZV_NCCL_LAYOUT_2_21;
    out->layout = (rdzv_nccl_layout_t) layout;

    if (s_first_nonzero(id, 0, RDZV_NCCL_ID_BYTES) == RDZV_NCCL_ID_BYTES)
        s_problem(out, "all bytes are zero: not an ID from ncclGetUniqueId");
    s_decode_address(id, out);

    size_t end = S_END_2_21;
    if (layout == RDZV_NCCL_LAYOUT_2_29) {
        end = S_END_2_29;
        out->n_ranks = n_ranks;
        if (n_ranks < 0)
            s_problem(out, "negative nRanks %d", (int) n_ranks);
    }
    size_t stray = s_first_nonzero(id, end, RDZV_NCCL_ID_BYTES);
    if (stray < RDZV_NCCL_ID_BYTES)
        s_problem(out, "nonzero byte at offset %zu, beyond the %s layout",
                  stray, rdzv_nccl_layout_name(layout));

    if (out->problem[0]) {
        errno = EBADMSG;
        return -1;
    }
    return 0;
}

const char *rdzv_nccl_layout_name(int layout)
{
    switch (layout) {
    case RDZV_NCCL_LAYOUT_2_21:
        return "2.21-2.28";
    case RDZV_NCCL_LAYOUT_2_29:
        return "2.29";
    case RDZV_NCCL_LAYOUT_AUTO:
        return "auto";
    default:
        return "unknown";
    }
}

static const char *s_family_name(int family)
{
    if (family == AF_INET)
        return "inet";
    if (family == AF_INET6)
        return "inet6";
    return NULL;
}

int rdzv_nccl_id_format(const rdzv_nccl_id_info_t *info, char *buf, size_t len)
{
    if (!info || !buf || len == 0) {
        errno = EINVAL;
        return -1;
    }
    const char *family = s_family_name(info->family);
    char family_text[32];
    if (family)
        snprintf(family_text, sizeof family_text, "%s", family);
    else
        snprintf(family_text, sizeof family_text, "unknown (%d)", info->family);

    int n = snprintf(buf, len, "magic 0x%016llx\nfamily %s\n",
                     (unsigned long long) info->magic, family_text);
    if (n >= 0 && family && (size_t) n < len)
        n += snprintf(buf + n, len - (size_t) n, "address %s\nport %u\n",
                      info->address, (unsigned) info->port);
    if (n >= 0 && info->layout == RDZV_NCCL_LAYOUT_2_29 && (size_t) n < len)
        n += snprintf(buf + n, len - (size_t) n, "nranks %d\n", info->n_ranks);
    if (n >= 0 && (size_t) n < len)
        n += snprintf(buf + n, len - (size_t) n, "layout %s\n",
                      rdzv_nccl_layout_name(info->layout));
    if (n >= 0 && info->problem[0] && (size_t) n < len)
        n += snprintf(buf + n, len - (size_t) n, "problem %s\n", info->problem);
    if (n < 0 || (size_t) n >= len) {
        buf[0] = '\0';
        errno = ENOSPC;
        return -1;
    }
    return n;
}
