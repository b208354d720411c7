/* Where each group's ranks serve, for routers and monitoring, built from
 * the status documents (rdzv_core_status_json): the API endpoints of a
 * group's serving ranks (GET /v1/groups/G/endpoints), and every rank's API
 * port as a target in Prometheus's HTTP service-discovery format (GET
 * /v1/sd); docs/man/rdzvd.8.scd and docs/deployment.md, "Routing". */
#ifndef RDZV_HTTP_SD_H
#define RDZV_HTTP_SD_H

#include <cjson/cJSON.h>

/* {"group":G,"epoch":E,"state":S,"endpoints":[{"rank","url","node","epoch"}]}
 * for group (one status object): its ranks alive and serving. */
cJSON *rdzv_http_endpoints(const cJSON *group);
/* [{"targets":["HOST:API"],"labels":{"group","rank","epoch","node"}}] for
 * groups (the status array): every rank of a complete epoch. */
cJSON *rdzv_http_sd(const cJSON *groups);

#endif
