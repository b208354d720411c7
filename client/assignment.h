/* Internal constructor of an assignment from an already parsed reply. */
#ifndef RDZV_ASSIGNMENT_H
#define RDZV_ASSIGNMENT_H

#include "rdzv.h"

#include <cjson/cJSON.h>

/* Validates obj (the "assignment" object of a join reply) and copies it
 * into a new assignment; NULL if any field is missing or malformed. obj
 * stays the caller's. */
rdzv_assignment_t *rdzv_assignment_from_cjson(const cJSON *obj);

#endif
