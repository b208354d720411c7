/* HAProxy's Runtime API (its "stats socket ... level admin"): the group's
 * ranks are dynamic servers of one backend, named rdzv-GROUP-HASH-RANK
 * (GROUP cut and made safe, HASH of the whole name, so that no two groups
 * share a name), added with "add server" and made ready; one whose address
 * changed is moved with "set server ... addr"; one that stops serving is
 * drained while its agent lives (requests in flight finish, no new ones
 * come), then put in maintenance and deleted once it holds no session or
 * after drain_s. Servers of other names are never touched. Addresses must
 * be IP literals (HAProxy resolves no name given at run time). HAProxy 2.4
 * and later (dynamic servers); tested with Debian 12's 2.6. */
#include "driver.h"

#include <arpa/inet.h>

#include <errno.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define S_IO_TIMEOUT_S 3
#define S_ANSWER_MAX (8 << 20)
#define S_NAME_MAX 128
#define S_COLUMNS_MAX 512        /* show stat has about 100 in HAProxy 2.6 */

/* A growing text buffer; the commands of one pass. */
typedef struct {
    char *text;
    size_t len, cap;
    bool failed;
} s_buf_t;

static void s_append(s_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_append(s_buf_t *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0,
                          fmt, ap);
        va_end(ap);
        if (n < 0)
            b->failed = true;
        else if (b->text && b->len + (size_t) n < b->cap) {
            b->len += (size_t) n;
            return;
        } else {
            size_t cap = (b->cap + (size_t) n + 1) * 2;
            char *grown = realloc(b->text, cap);
            if (!grown)
                b->failed = true;
            else
                b->text = grown, b->cap = cap;
        }
    }
}

/* Sends cmd (commands joined by ';') and reads the answer to the end:
 * HAProxy answers one line of commands and closes. */
static int s_cli(rdzv_router_sync_t *s, const char *cmd, char **answer)
{
    const char *path = s->url->base;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rdzv_router_fail(s, RDZV_ROUTER_ERR_UNREACHABLE, "socket: %s", strerror(errno));
    struct timeval tv = { .tv_sec = S_IO_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    /* rdzv_router_url_parse keeps the path shorter than sun_path. */
    memcpy(sa.sun_path, path, strnlen(path, sizeof sa.sun_path - 1));
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        return rdzv_router_fail(s, RDZV_ROUTER_ERR_UNREACHABLE, "cannot connect to HAProxy's "
                                "socket %s: %s", path, strerror(e));
    }
    size_t len = strlen(cmd);
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, cmd + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            int e = errno;
            close(fd);
            return rdzv_router_fail(s, e == EAGAIN ? RDZV_ROUTER_ERR_TIMEOUT
                                    : RDZV_ROUTER_ERR_UNREACHABLE, "writing to %s: %s", path,
                                    strerror(e));
        }
        off += (size_t) n;
    }
    s_buf_t out = { 0 };
    for (;;) {
        char chunk[16384];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n == 0)
            break;
        if (n < 0 || out.len + (size_t) n > S_ANSWER_MAX) {
            int e = n < 0 ? errno : EMSGSIZE;
            close(fd);
            free(out.text);
            return rdzv_router_fail(s, e == EAGAIN ? RDZV_ROUTER_ERR_TIMEOUT
                                    : RDZV_ROUTER_ERR_PROTOCOL, "reading from %s: %s", path,
                                    strerror(e));
        }
        s_append(&out, "%.*s", (int) n, chunk);
    }
    close(fd);
    if (out.failed || !out.text) {
        free(out.text);
        out.text = strdup("");
    }
    *answer = out.text;
    return *answer ? 0 : rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "out of memory");
}

/* rdzv-GROUP-HASH-: the group's name cut to 48 bytes with what HAProxy
 * does not allow in a server name made '_', and the FNV-1a hash of the
 * whole name, so that "a/b" and "a_b" (or two long names alike at first)
 * never share servers. */
static void s_prefix(const char *group, char *out, size_t len)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *) group; *p; p++)
        h = (h ^ *p) * 16777619u;
    int n = snprintf(out, len, "rdzv-%.48s-", group);
    for (int i = 5; i < n - 1 && (size_t) i < len; i++) {
        char c = out[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '_' || c == '.' || c == '-'))
            out[i] = '_';
    }
    snprintf(out + n, len - (size_t) n, "%08x-", (unsigned) h);
}

/* addr ("IP:PORT", "[IP6]:PORT", as show stat prints it) made canonical
 * like the members' (inet_ntop), so that one address compares equal
 * however it was written; "" when it is not an IP address. */
static void s_canonical(const char *addr, char *out, size_t len)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    out[0] = '\0';
    if (!colon || (size_t) (colon - addr) >= sizeof host)
        return;
    memcpy(host, addr, (size_t) (colon - addr));
    host[colon - addr] = '\0';
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') {
        h[strlen(h) - 1] = '\0';
        h++;
    }
    unsigned char bin[sizeof (struct in6_addr)];
    char ip[INET6_ADDRSTRLEN];
    int family = strchr(h, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, h, bin) == 1 && inet_ntop(family, bin, ip, sizeof ip))
        snprintf(out, len, family == AF_INET6 ? "[%s]:%s" : "%s:%s", ip, colon + 1);
}

/* One of the group's servers as "show stat" lists it. */
typedef struct {
    int rank;
    char addr[RDZV_ROUTER_ADDR_MAX];
    bool drain, maint;
    long scur, lastchg;
} s_server_t;

/* The index of name in the CSV header, -1 if absent. */
static int s_column(char *header, const char *name)
{
    int i = 0;
    for (char *save = NULL, *f = strtok_r(header, ",", &save); f;
         f = strtok_r(NULL, ",", &save), i++)
        if (strcmp(f, name) == 0)
            return i;
    return -1;
}

/* Cuts line at its commas into fields (empty ones count), at most max;
 * how many. */
static int s_fields(char *line, char **fields, int max)
{
    int k = 0;
    fields[k++] = line;
    for (char *p = line; *p && k < max; p++)
        if (*p == ',') {
            *p = '\0';
            fields[k++] = p + 1;
        }
    return k;
}

/* The group's servers in answer (show stat's CSV), at most max; -1 when
 * the answer is not that CSV. */
static int s_parse_stat(rdzv_router_sync_t *s, char *answer, const char *prefix,
                        s_server_t *out, int max)
{
    if (strncmp(answer, "# pxname,", 9) != 0) {
        char *nl = strchr(answer, '\n');
        if (nl)
            *nl = '\0';
        bool missing = strstr(answer, "No such") != NULL;
        return rdzv_router_fail(s, missing ? RDZV_ROUTER_ERR_NOT_FOUND : RDZV_ROUTER_ERR_PROTOCOL,
                                "HAProxy's show stat of backend %s answered \"%.120s\"",
                                s->url->backend, answer);
    }
    char *nl = strchr(answer, '\n');
    if (!nl)
        return rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "show stat ended in its header");
    *nl = '\0';
    char *header = strdup(answer + 2);
    if (!header)
        return rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "out of memory");
    int cols[5];
    const char *names[5] = { "svname", "scur", "status", "lastchg", "addr" };
    for (int i = 0; i < 5; i++) {
        strcpy(header, answer + 2);
        cols[i] = s_column(header, names[i]);
    }
    free(header);
    for (int i = 0; i < 5; i++)
        if (cols[i] < 0)
            return rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "show stat has no %s column",
                                    names[i]);
    int n = 0;
    size_t plen = strlen(prefix);
    for (char *line = nl + 1, *next; line && *line && n < max; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *fields[S_COLUMNS_MAX];
        int nfields = s_fields(line, fields, S_COLUMNS_MAX), need = 0;
        for (int i = 0; i < 5; i++)
            need = cols[i] > need ? cols[i] : need;
        if (nfields <= need)
            continue;
        /* Ours: the prefix and a rank written as rdzvd writes it (no
         * leading zero), so that no two servers are one rank. */
        const char *name = fields[cols[0]], *digits = name + plen;
        size_t ndigits = strspn(digits, "0123456789");
        if (strncmp(name, prefix, plen) != 0 || ndigits == 0 || ndigits > 8
            || digits[ndigits] || (digits[0] == '0' && ndigits > 1))
            continue;
        const char *status = fields[cols[2]];
        s_server_t *v = &out[n++];
        v->rank = atoi(digits);
        s_canonical(fields[cols[4]], v->addr, sizeof v->addr);
        v->maint = strstr(status, "MAINT") == status;
        v->drain = strstr(status, "DRAIN") == status || strstr(status, "NOLB") != NULL;
        v->scur = strtol(fields[cols[1]], NULL, 10);
        v->lastchg = strtol(fields[cols[3]], NULL, 10);
    }
    return n;
}

static const rdzv_router_member_t *s_member(const rdzv_router_sync_t *s, int rank)
{
    for (int i = 0; i < s->nmembers; i++)
        if (s->members[i].rank == rank)
            return &s->members[i];
    return NULL;
}

/* The group's servers now (*v malloc'd, one slot per line of the answer);
 * how many, or -1 on failure. */
static int s_servers(rdzv_router_sync_t *s, const char *prefix, s_server_t **v)
{
    char cmd[RDZV_ROUTER_URL_MAX + 32], *answer = NULL;
    snprintf(cmd, sizeof cmd, "show stat %s 4 -1\n", s->url->backend);
    *v = NULL;
    if (s_cli(s, cmd, &answer) < 0)
        return -1;
    int lines = 1;
    for (const char *p = answer; (p = strchr(p, '\n')); p++)
        lines++;
    *v = calloc((size_t) lines, sizeof **v);
    int n = *v ? s_parse_stat(s, answer, prefix, *v, lines)
               : rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "out of memory");
    free(answer);
    return n;
}

/* Appends one command; the commands of a pass go joined by ';' in one line. */
static void s_cmd(s_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_cmd(s_buf_t *b, const char *fmt, ...)
{
    char one[RDZV_ROUTER_URL_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    s_append(b, "%s%s", b->len ? "; " : "", one);
}

static void s_remove(s_buf_t *b, const char *be, const char *prefix, int rank)
{
    s_cmd(b, "set server %s/%s%d state maint", be, prefix, rank);
    s_cmd(b, "shutdown sessions server %s/%s%d", be, prefix, rank);
    s_cmd(b, "del server %s/%s%d", be, prefix, rank);
}

/* The commands that move the servers v[0..n) towards the members. Every
 * word in them is safe on HAProxy's command line: the backend and prefix
 * by construction, the hosts as IP literals (rdzv_router_host). */
static void s_plan(rdzv_router_sync_t *s, const char *prefix, const s_server_t *v, int n,
                   s_buf_t *cmd)
{
    const char *be = s->url->backend;
    for (int i = 0; i < s->nmembers; i++) {
        const rdzv_router_member_t *m = &s->members[i];
        if (!m->want)
            continue;
        if (!m->ip) {
            rdzv_router_fail(s, RDZV_ROUTER_ERR_REFUSED, "rank %d's host %s is a name: HAProxy "
                             "needs an IP address (rdzv agent --host)", m->rank, m->host);
            continue;
        }
        const s_server_t *have = NULL;
        for (int k = 0; k < n && !have; k++)
            if (v[k].rank == m->rank)
                have = &v[k];
        /* A moved rank keeps its server: its address changes in place. */
        if (!have)
            s_cmd(cmd, "add server %s/%s%d %s", be, prefix, m->rank, m->addr);
        else if (strcmp(have->addr, m->addr) != 0)
            s_cmd(cmd, "set server %s/%s%d addr %s port %d", be, prefix, m->rank, m->host,
                  m->port);
        if (!have || have->drain || have->maint || strcmp(have->addr, m->addr) != 0)
            s_cmd(cmd, "set server %s/%s%d state ready", be, prefix, m->rank);
    }
    for (int k = 0; k < n; k++) {
        const rdzv_router_member_t *m = s_member(s, v[k].rank);
        if (m && ((m->want && m->ip) || m->keep))
            continue;
        bool alive = m && m->alive;
        if (!v[k].drain && !v[k].maint && alive)
            s_cmd(cmd, "set server %s/%s%d state drain", be, prefix, v[k].rank);
        else if (v[k].maint || !alive || v[k].scur == 0 || v[k].lastchg >= s->drain_s)
            s_remove(cmd, be, prefix, v[k].rank);
    }
}

/* The first line of answer that is not one of HAProxy's successes. */
static const char *s_complaint(char *answer)
{
    for (char *save = NULL, *l = strtok_r(answer, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (*l && strcmp(l, "New server registered.") != 0 && strcmp(l, "Server deleted.") != 0
            && strncmp(l, "IP changed from", 15) != 0 && strncmp(l, "no need to change", 17) != 0
            && strncmp(l, "port changed from", 17) != 0)
            return l;
    return NULL;
}

/* registered and draining from v: what HAProxy lists now. */
static void s_report(rdzv_router_sync_t *s, const s_server_t *v, int n)
{
    s->known = true;
    s->nregistered = s->ndraining = 0;
    for (int k = 0; k < n; k++) {
        const rdzv_router_member_t *m = s_member(s, v[k].rank);
        if (!m)
            continue;         /* not a rank of the group now: nothing to say of it */
        bool ready = !v[k].drain && !v[k].maint && strcmp(v[k].addr, m->addr) == 0;
        if (ready && (m->want || m->keep) && s->nregistered < s->nmembers)
            s->registered[s->nregistered++] = m->rank;
        else if (s->ndraining < s->nmembers)
            s->draining[s->ndraining++] = m->rank;
    }
}

int rdzv_router_haproxy_sync(rdzv_router_sync_t *s)
{
    char prefix[S_NAME_MAX];
    s_prefix(s->group, prefix, sizeof prefix);
    s_server_t *v = NULL;
    int n = s_servers(s, prefix, &v);
    if (n < 0) {
        free(v);
        return -1;
    }
    s_buf_t cmd = { 0 };
    s_plan(s, prefix, v, n, &cmd);
    int rc = s->err[0] ? -1 : 0;      /* a member s_plan could not place */
    char complaint[160] = "";
    if (cmd.len > 0) {
        s_append(&cmd, "\n");
        char *answer = NULL;
        if (cmd.failed)
            rc = rdzv_router_fail(s, RDZV_ROUTER_ERR_PROTOCOL, "out of memory");
        else if (s_cli(s, cmd.text, &answer) < 0)
            rc = -1;
        const char *c = answer ? s_complaint(answer) : NULL;
        if (c)
            snprintf(complaint, sizeof complaint, "%s", c);
        free(answer);
        free(v);
        v = NULL;
        if ((n = s_servers(s, prefix, &v)) < 0) {
            free(cmd.text);
            free(v);
            return -1;
        }
    }
    free(cmd.text);
    s_report(s, v, n);
    for (int i = 0; rc == 0 && i < s->nmembers; i++) {
        bool found = false;
        for (int k = 0; k < s->nregistered && !found; k++)
            found = s->registered[k] == s->members[i].rank;
        if (s->members[i].want && !found)
            rc = rdzv_router_fail(s, RDZV_ROUTER_ERR_REFUSED, "HAProxy did not make rank %d "
                                  "ready in backend %s: \"%s\"", s->members[i].rank,
                                  s->url->backend, complaint);
    }
    free(v);
    return rc;
}
