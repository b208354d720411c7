/* agent_curl.h: libcurl by dlopen, once. */
#include "agent_curl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The soname of the libcurl the agent is built against (the -dev package's
 * libcurl.so points at it); Debian's GnuTLS flavour as a fallback. */
static const char *const s_names[] = { "libcurl.so.4", "libcurl-gnutls.so.4" };

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static rdzv_agent_curl_t s_curl;
static bool s_ready;
static char s_why[256];

/* dlsym() returns an object pointer; ISO C has no cast to a function one. */
static bool s_sym(void *lib, const char *name, void *fn_ptr, size_t size)
{
    void *obj = dlsym(lib, name);
    if (!obj) {
        snprintf(s_why, sizeof s_why, "libcurl has no %s", name);
        return false;
    }
    memcpy(fn_ptr, &obj, size);
    return true;
}

static void s_load(void)
{
    void *lib = NULL;
    for (size_t i = 0; !lib && i < sizeof s_names / sizeof s_names[0]; i++)
        lib = dlopen(s_names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(s_why, sizeof s_why, "cannot load libcurl (%s; install libcurl4)",
                 why ? why : "not found");
        return;
    }
    rdzv_agent_curl_t *c = &s_curl;
    if (!s_sym(lib, "curl_global_init", &c->global_init, sizeof c->global_init)
        || !s_sym(lib, "curl_easy_init", &c->easy_init, sizeof c->easy_init)
        || !s_sym(lib, "curl_easy_setopt", &c->easy_setopt, sizeof c->easy_setopt)
        || !s_sym(lib, "curl_easy_perform", &c->easy_perform, sizeof c->easy_perform)
        || !s_sym(lib, "curl_easy_getinfo", &c->easy_getinfo, sizeof c->easy_getinfo)
        || !s_sym(lib, "curl_easy_cleanup", &c->easy_cleanup, sizeof c->easy_cleanup)
        || !s_sym(lib, "curl_easy_strerror", &c->easy_strerror, sizeof c->easy_strerror))
        return;                  /* the library stays loaded: harmless, and rare */
    /* Not thread-safe in every libcurl build: once, before any handle. */
    CURLcode rc = c->global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        snprintf(s_why, sizeof s_why, "libcurl: %s", c->easy_strerror(rc));
        return;
    }
    s_ready = true;
}

const rdzv_agent_curl_t *rdzv_agent_curl(char *err, size_t errlen)
{
    pthread_once(&s_once, s_load);
    if (!s_ready)
        snprintf(err, errlen, "%s", s_why);
    return s_ready ? &s_curl : NULL;
}
