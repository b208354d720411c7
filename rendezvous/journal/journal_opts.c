#include "journal_opts.h"

#include <stdlib.h>
#include <string.h>

enum { S_ETCD = RDZV_JOURNAL_OPT_FIRST, S_PREFIX, S_CA, S_CERT, S_KEY, S_LEASE };

const struct option rdzv_journal_options[] = {
    { "etcd", required_argument, 0, S_ETCD }, { "etcd-prefix", required_argument, 0, S_PREFIX },
    { "etcd-ca", required_argument, 0, S_CA }, { "etcd-cert", required_argument, 0, S_CERT },
    { "etcd-key", required_argument, 0, S_KEY }, { "etcd-lease", required_argument, 0, S_LEASE },
    { 0, 0, 0, 0 },
};

void rdzv_journal_usage(FILE *out)
{
    fprintf(out,
        "  --etcd URL[,URL...]      keep the journal in etcd (http[s]://HOST:2379) instead of\n"
        "                           --state-dir; replicas elect one leader, the others\n"
        "                           stand by and answer not_leader%s\n"
        "  --etcd-prefix P          the keys rdzvd writes in etcd (default /rdzv)\n"
        "  --etcd-ca/--etcd-cert/--etcd-key FILE   TLS to etcd\n"
        "  --etcd-lease S           the leader's lease: a dead leader is replaced this long\n"
        "                           after it stopped (default 5)\n",
#ifdef RDZV_HAVE_ETCD
        ""
#else
        " (not in this build: no libcurl)"
#endif
        );
}

int rdzv_journal_opt(rdzv_journal_remote_t *o, int id, const char *arg, char *err, size_t errlen)
{
    rdzv_etcd_config_t *e = &o->etcd;
    char *end = NULL;
    long v;
    switch (id) {
    case S_ETCD: e->endpoints = arg; return 0;
    case S_PREFIX: e->prefix = arg; return 0;
    case S_CA: e->ca = arg; return 0;
    case S_CERT: e->cert = arg; return 0;
    case S_KEY: e->key = arg; return 0;
    case S_LEASE:
        v = strtol(arg, &end, 10);
        if (!*arg || *end || v < 2 || v > 3600) {
            snprintf(err, errlen, "--etcd-lease must be an integer in [2, 3600], not \"%s\"", arg);
            return -1;
        }
        e->ttl_s = (int) v;
        return 0;
    }
    snprintf(err, errlen, "unknown journal option %d", id);
    return -1;
}

int rdzv_journal_opts_done(rdzv_journal_remote_t *o, bool advertise,
                           const rdzv_journal_remote_t **remote, char *err, size_t errlen)
{
    const rdzv_etcd_config_t *e = &o->etcd;
    *remote = NULL;
    if (e->prefix && e->prefix[0] != '/') {
        snprintf(err, errlen, "--etcd-prefix must start with '/', not \"%s\"", e->prefix);
        return -1;
    }
    if (!e->endpoints && (e->prefix || e->ca || e->cert || e->key || e->ttl_s || advertise)) {
        snprintf(err, errlen, "--etcd-* and --advertise go with --etcd");
        return -1;
    }
    if (e->endpoints)
        *remote = o;
    return 0;
}

const char *rdzv_journal_remote_name(const rdzv_journal_remote_t *remote)
{
    (void) remote;
    return "etcd";
}
