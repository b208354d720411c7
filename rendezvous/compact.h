/* Compaction: the journal rewritten as the records of the current state. */
#ifndef RDZV_COMPACT_H
#define RDZV_COMPACT_H

#include <cjson/cJSON.h>

#include "state.h"

/* The records that rebuild st, in replay order, as a JSON array; NULL out
 * of memory. */
cJSON *rdzv_compact_records(const rdzv_state_t *st);

#endif
