#include "agent_portstate.h"
#include "agent_proto.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kernel's TCP states as /proc/net/tcp numbers them. */
static const char *const s_states[] = {
    [1] = "ESTABLISHED", [2] = "SYN_SENT", [3] = "SYN_RECV", [4] = "FIN_WAIT1",
    [5] = "FIN_WAIT2", [6] = "TIME_WAIT", [7] = "CLOSE", [8] = "CLOSE_WAIT",
    [9] = "LAST_ACK", [10] = "LISTEN", [11] = "CLOSING", [12] = "NEW_SYN_RECV",
};
#define S_TIME_WAIT 6
#define S_LISTEN 10

bool rdzv_port_holders_parse_line(const char *line, int *port, int *state, unsigned long *inode)
{
    /* "  0: 0100007F:4C2D 00000000:0000 0A 00000000:00000000 00:00000000
     *  00000000  1000  0 123456 ..." (tcp6: 32 hex digits of address) */
    unsigned p, st;
    unsigned long ino;
    if (sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu",
               &p, &st, &ino) != 3 || p > 65535 || st > 12)
        return false;
    *port = (int) p;
    *state = (int) st;
    *inode = ino;
    return true;
}

static void s_scan(const char *path, const int *ports, size_t n, rdzv_port_holders_t *outs,
                   bool *read_one)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    *read_one = true;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        int p, st;
        unsigned long ino;
        if (!rdzv_port_holders_parse_line(line, &p, &st, &ino))
            continue;
        size_t k = 0;
        while (k < n && ports[k] != p)
            k++;
        if (k == n)
            continue;
        rdzv_port_holders_t *out = &outs[k];
        if (st == S_TIME_WAIT) {
            out->time_wait++;
            continue;
        }
        out->live++;
        out->listening += st == S_LISTEN;
        /* Name a listener if there is one: it is what takes connections. */
        if (!out->inode || (st == S_LISTEN && strcmp(out->state, "LISTEN") != 0)) {
            out->state = s_states[st] ? s_states[st] : "?";
            out->inode = ino;
        }
    }
    fclose(f);
}

/* Whether process pid holds the socket with inode ino. */
static bool s_holds(const char *pid, unsigned long ino)
{
    char dir[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
    snprintf(want, sizeof want, "socket:[%lu]", ino);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char link[PATH_MAX], target[64];
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, want) == 0;
        }
    }
    closedir(d);
    return found;
}

static void s_read_small(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

static void s_agent_socket_of(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int) pid);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    static const char key[] = RDZV_AGENT_SOCKET_ENV "=";
    char entry[4096];
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (c != '\0' && n < sizeof entry - 1) {
            entry[n++] = (char) c;
            continue;
        }
        entry[n] = '\0';
        if (strncmp(entry, key, sizeof key - 1) == 0) {
            size_t m = strlen(entry + sizeof key - 1);
            m = m < len - 1 ? m : len - 1;
            memcpy(buf, entry + sizeof key - 1, m);
            buf[m] = '\0';
            break;
        }
        n = 0;
    }
    fclose(f);
}

static void s_find_holder(rdzv_port_holders_t *out)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || !s_holds(e->d_name, out->inode))
            continue;
        out->pid = (pid_t) atoi(e->d_name);
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/comm", e->d_name);
        s_read_small(path, out->comm, sizeof out->comm);
        s_agent_socket_of(out->pid, out->agent_socket, sizeof out->agent_socket);
        break;
    }
    closedir(d);
}

int rdzv_port_holders_many(const int *ports, size_t n, rdzv_port_holders_t *out)
{
    for (size_t k = 0; k < n; k++) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].state = "";
    }
    bool read_one = false;
    s_scan("/proc/net/tcp", ports, n, out, &read_one);
    s_scan("/proc/net/tcp6", ports, n, out, &read_one);
    if (!read_one)
        return -1;
    for (size_t k = 0; k < n; k++)
        if (out[k].inode)
            s_find_holder(&out[k]);
    return 0;
}

int rdzv_port_holders(int port, rdzv_port_holders_t *out)
{
    return rdzv_port_holders_many(&port, 1, out);
}

void rdzv_port_holders_name(const rdzv_port_holders_t *st, int port, char *buf, size_t len)
{
    if (st->pid > 0)
        snprintf(buf, len, "a %s socket of pid %d (%s)", st->state, (int) st->pid, st->comm);
    else
        snprintf(buf, len, "a %s socket of a process this uid cannot see (as root, "
                 "ss -tanp 'sport = :%d' names it)", st->state, port);
}
