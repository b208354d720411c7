#include "nccl_mode.h"

#include <assert.h>
#include <string.h>

static const char *const s_names[RDZV_NCCL_MODES] = { "none", "server", "rank0" };

const char *rdzv_nccl_mode_name(rdzv_nccl_mode_t mode)
{
    assert(mode >= 0 && mode < RDZV_NCCL_MODES);
    return s_names[mode];
}

int rdzv_nccl_mode_parse(const char *name, rdzv_nccl_mode_t *out)
{
    for (int i = 0; name && i < RDZV_NCCL_MODES; i++)
        if (strcmp(name, s_names[i]) == 0) {
            *out = (rdzv_nccl_mode_t) i;
            return 0;
        }
    return -1;
}
