#include "metrics.h"
#include "rdzv_proto.h"

#include <string.h>

const double rdzv_hist_bounds[RDZV_HIST_BUCKETS] = {
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5, 30, 120,
};

const char *const rdzv_error_codes[RDZV_ERROR_CODES] = {
    RDZV_E_BAD_JSON, RDZV_E_BAD_VERSION, RDZV_E_UNKNOWN_OP, RDZV_E_BAD_REQUEST,
    RDZV_E_TOO_LARGE, RDZV_E_BAD_WORLD, RDZV_E_BAD_RANK, RDZV_E_WORLD_MISMATCH,
    RDZV_E_RANK_TAKEN, RDZV_E_STALE_EPOCH, RDZV_E_NOT_FOUND, RDZV_E_PORTS_EXHAUSTED,
    RDZV_E_TIMEOUT, RDZV_E_INTERNAL, RDZV_E_FORBIDDEN, RDZV_E_LIMIT,
    RDZV_E_NOT_LEADER, RDZV_E_UNAVAILABLE, RDZV_E_BUSY,
};

int rdzv_error_code_index(const char *code)
{
    for (int i = 0; i < RDZV_ERROR_CODES; i++)
        if (strcmp(rdzv_error_codes[i], code) == 0)
            return i;
    return -1;
}

void rdzv_histogram_observe(rdzv_histogram_t *h, double seconds)
{
    h->count++;
    h->sum += seconds;
    for (int i = 0; i < RDZV_HIST_BUCKETS; i++)
        if (seconds <= rdzv_hist_bounds[i]) {
            h->buckets[i]++;
            return;
        }
}
