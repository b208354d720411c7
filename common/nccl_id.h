/* Decoding of NCCL unique IDs for humans: where the bootstrap root listens.
 *
 * An ncclUniqueId is 128 bytes holding NCCL's bootstrap handle, copied raw:
 *   offset  0  uint64_t magic           (byte order of the machine that made it)
 *   offset  8  union socket address     (28 bytes: sockaddr_in or sockaddr_in6;
 *              family at 8-9 in host order, port at 10-11 in network order,
 *              IPv4 address at 12-15, IPv6 flowinfo 12-15, address 16-31,
 *              scope id 32-35)
 *   offset 36  int nRanks               (NCCL 2.29 and later only)
 * and zero everywhere else. Decoding needs no NCCL. */
#ifndef RDZV_NCCL_ID_H
#define RDZV_NCCL_ID_H

#include "rdzv_proto.h"

#include <stddef.h>
#include <stdint.h>

/* Room for an IPv6 address text plus "%" and a 10-digit scope id. */
#define RDZV_NCCL_ID_ADDR_MAX 64
/* Room for the one-line reason a malformed ID gets. */
#define RDZV_NCCL_ID_PROBLEM_MAX 96
/* Enough for every line rdzv_nccl_id_format writes. */
#define RDZV_NCCL_ID_FORMAT_MAX 384

typedef enum {
    RDZV_NCCL_LAYOUT_AUTO = 0,  /* 2.29 if nRanks is set, else 2.21 */
    RDZV_NCCL_LAYOUT_2_21 = 1,  /* NCCL 2.21 to 2.28: magic and address */
    RDZV_NCCL_LAYOUT_2_29 = 2,  /* NCCL 2.29: magic, address and nRanks */
} rdzv_nccl_layout_t;

typedef struct {
    uint64_t magic;
    int family;                 /* AF_INET, AF_INET6 or the raw value read */
    char address[RDZV_NCCL_ID_ADDR_MAX];  /* "" when the family is unknown */
    uint16_t port;              /* host order; 0 when the family is unknown */
    uint32_t scope_id;          /* IPv6 only */
    rdzv_nccl_layout_t layout;  /* the layout decoded: never AUTO */
    int n_ranks;                /* 2.29 layout only; 0 otherwise */
    char problem[RDZV_NCCL_ID_PROBLEM_MAX];  /* "" when well formed */
} rdzv_nccl_id_info_t;

/* Decodes id into *out. layout is one of rdzv_nccl_layout_t. Returns 0 when
 * id is a well-formed ID of that layout; -1 with errno EINVAL for a NULL
 * argument or an unknown layout (out untouched); -1 with errno EBADMSG when
 * the ID is malformed (all zero, unknown family, stray bytes beyond the
 * layout), in which case *out still holds every field that could be read
 * and out->problem says what is wrong. */
int rdzv_nccl_id_decode(const unsigned char id[RDZV_NCCL_ID_BYTES],
                        rdzv_nccl_id_info_t *out, int layout);

/* Name of a layout: "2.21-2.28", "2.29" or "auto". */
const char *rdzv_nccl_layout_name(int layout);

/* Writes info as "key value" lines (magic, family, address, port, nranks
 * for the 2.29 layout, layout, problem if any) into buf, NUL-terminated.
 * Returns the length written, or -1 with errno EINVAL (NULL argument) or
 * ENOSPC (buf too small; RDZV_NCCL_ID_FORMAT_MAX always fits). */
int rdzv_nccl_id_format(const rdzv_nccl_id_info_t *info, char *buf, size_t len);

#endif
