/* Who makes a group's NCCL unique IDs, and the names the protocol and the
 * journal give each mode. */
#ifndef RDZV_NCCL_MODE_H
#define RDZV_NCCL_MODE_H

typedef enum {
    RDZV_NCCL_NONE,
    RDZV_NCCL_SERVER,            /* rdzvd, roots in a helper process */
    RDZV_NCCL_RANK0,             /* rank 0's process, sent with its join */
    RDZV_NCCL_MODES
} rdzv_nccl_mode_t;

const char *rdzv_nccl_mode_name(rdzv_nccl_mode_t mode);
/* 0 and the mode in *out, or -1 for a name (or NULL) that is none. */
int rdzv_nccl_mode_parse(const char *name, rdzv_nccl_mode_t *out);

#endif
