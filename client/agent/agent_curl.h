/* libcurl for the engine's health check (agent_health.c), loaded when the
 * first check starts instead of when rdzv starts. Linked, libcurl and the
 * 21 libraries it brings (TLS, Kerberos, LDAP, SSH) were loaded by every
 * `rdzv` run, the agent's start included, and that was about a quarter of
 * what the agent added to an engine's start (docs/performance.md); a check
 * is plain HTTP on loopback, and most runs never make one. */
#ifndef RDZV_AGENT_CURL_H
#define RDZV_AGENT_CURL_H

#include <curl/curl.h>
#include <stddef.h>

/* The calls the health check makes, as libcurl exports them. */
typedef struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
    CURLcode (*easy_perform)(CURL *curl);
    CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *curl);
    const char *(*easy_strerror)(CURLcode code);
} rdzv_agent_curl_t;

/* Loads libcurl and runs curl_global_init, once for the process (any
 * thread); NULL with the reason in err when either fails. */
const rdzv_agent_curl_t *rdzv_agent_curl(char *err, size_t errlen);

#endif
