#include "agent.h"
#include "agent_child.h"
#include "agent_cli.h"
#include "agent_control.h"
#include "agent_drain.h"
#include "agent_files.h"
#include "agent_health.h"
#include "agent_lease.h"
#include "agent_opts.h"
#include "agent_portstate.h"
#include "agent_proto.h"
#include "agent_reserve.h"
#include "agent_serve.h"
#include "rdzv_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AGENT_MAX_POLL (RDZV_AGENT_MAX_CONNS + 4)
#define RETAKE_LOCK_MS 1000

typedef struct {
    rdzv_agent_opts_t opts;
    int sig_fd;
    rdzv_agent_control_t *control;
    rdzv_agent_serve_t *serve;
    rdzv_agent_health_t *health;  /* the engine's health checks, once it may run */
    rdzv_agent_drain_watch_t *drain_watch;   /* PATH.drain (agent_drain.h) */
    int *reservations;         /* one per plan port */
    int *locks;                /* the network namespace's lock on each (agent_reserve.h) */
    int *plan;
    size_t nplan;
    int range_base;
    int range_limit;
    char *env_path;
    int64_t epoch;             /* of the assignment PATH.env holds */
    char *session_path;        /* PATH.session: held until the agent serves */
    char session[2 * 16 + 1];
    pid_t child;
    /* --restart: CMD was told to stop; once it has, it starts again with
     * this environment, the new epoch's. */
    char *restart_env;
    rdzv_agent_progress_t *progress;  /* until the first assignment */
    bool done;
    int exit_code;
    /* A drain (SIGTERM with --router, or PATH.drain) runs beside the loop:
     * at its end, or at drain_until_ms if rdzvd never answers, the signal
     * held back goes to CMD and PATH.drain goes. */
    bool draining, drained;
    int drain_signal;          /* held back until the drain's end; 0: none */
    bool drain_file;           /* PATH.drain asked for it */
    int64_t drain_until_ms;
} s_agent_t;

#define S_FAREWELL_MS 1000

static int64_t s_mono_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void s_drain_start(s_agent_t *self)
{
    if (self->draining || self->drained)
        return;
    self->draining = true;
    self->drain_until_ms = s_mono_ms() + self->opts.drain_timeout_s * 1000 + 1000;
    rdzv_agent_control_drain_start(self->control, self->opts.drain_timeout_s * 1000);
}

/* The drain is over (or its time is): what waited for it goes on. */
static void s_drain_end(s_agent_t *self)
{
    self->draining = false;
    self->drained = true;
    if (self->drain_signal && self->child > 0)
        kill(self->child, self->drain_signal);
    self->drain_signal = 0;
    if (self->drain_file)
        rdzv_agent_drain_watch_done(self->drain_watch);
    self->drain_file = false;
}

static void s_fatal(s_agent_t *self, int code, const char *why)
{
    fprintf(stderr, "rdzv agent: %s\n", why);
    self->done = true;
    self->exit_code = code;
}

/* The managed range: "port_range":[base,limit] in the assignment when rdzvd
 * sends it, the agent's option otherwise. */
static void s_read_range(s_agent_t *self, const rdzv_assignment_t *a)
{
    self->range_base = self->opts.range_base;
    self->range_limit = self->opts.range_limit;
    cJSON *root = cJSON_Parse(rdzv_assignment_json(a));
    cJSON *range = cJSON_GetObjectItemCaseSensitive(root, "port_range");
    if (cJSON_IsArray(range) && cJSON_GetArraySize(range) == 2) {
        cJSON *b = cJSON_GetArrayItem(range, 0), *l = cJSON_GetArrayItem(range, 1);
        if (cJSON_IsNumber(b) && cJSON_IsNumber(l) && b->valuedouble >= 1
            && l->valuedouble <= 65536 && b->valuedouble < l->valuedouble) {
            self->range_base = (int) b->valuedouble;
            self->range_limit = (int) l->valuedouble;
        }
    }
    cJSON_Delete(root);
}

static int s_write_env_file(s_agent_t *self, const rdzv_assignment_t *a)
{
    char *text = rdzv_agent_cli_env(a, self->opts.server);
    rdzv_agent_env_file_t spec = {
        .path = self->env_path, .text = text, .range_base = self->range_base,
        .range_limit = self->range_limit, .allow_uids = self->opts.allow_uids,
        .n_allow_uids = self->opts.n_allow_uids };
    int rc = text ? rdzv_agent_env_file_write(&spec) : -1;
    free(text);
    return rc;
}

static void s_save_session(const s_agent_t *self)
{
    rdzv_agent_session_save(self->session_path, self->session);
}

/* A live socket already on a port the agent reserved beside it (the
 * kernel lets sockets of one uid share a port with SO_REUSEPORT): only
 * this rank's own engine, left running by an agent that died, may keep it;
 * anyone else's listener would take part of the connections. Every plan
 * port at once: /proc/net/tcp is read once. 0, or -1 with the reason in
 * err. */
static int s_check_beside(const s_agent_t *self, char *err, size_t errlen)
{
    rdzv_port_holders_t *st = calloc(self->nplan + 1, sizeof *st);
    if (!st || rdzv_port_holders_many(self->plan, self->nplan, st) < 0) {
        free(st);
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; i < self->nplan && rc == 0; i++) {
        if (!st[i].listening || strcmp(st[i].agent_socket, self->opts.socket_path) == 0)
            continue;
        char holder[256];
        rdzv_port_holders_name(&st[i], self->plan[i], holder, sizeof holder);
        snprintf(err, errlen, "port %d is held by %s, which is not this agent's engine "
                 "(RDZV_AGENT_SOCKET %s): a reservation beside it would split its "
                 "connections. Stop that process, or give its group other ports",
                 self->plan[i], holder, *st[i].agent_socket ? st[i].agent_socket : "unset");
        rc = -1;
    }
    free(st);
    return rc;
}

/* Why port cannot be reserved now: 0 if only TIME_WAIT stands in the way
 * (waiting helps), or -1 with the holder named in err. */
static int s_why_in_use(int port, int *time_wait, char *err, size_t errlen)
{
    rdzv_port_holders_t st;
    if (rdzv_port_holders(port, &st) < 0) {
        snprintf(err, errlen, "cannot reserve port %d: Address already in use (and "
                 "/proc/net/tcp, which would say by whom, cannot be read)", port);
        return -1;
    }
    *time_wait = st.time_wait;
    /* Only TIME_WAIT: it goes by itself. A TIME_WAIT left by a socket
     * without SO_REUSEADDR refuses even the reuse probe, so it is enough
     * that /proc/net/tcp shows nothing else; a bound socket it cannot show
     * is named once the TIME_WAIT is gone. */
    if (!st.live && (st.time_wait || rdzv_reserve_would_reuse(port)))
        return 0;
    char holder[256];
    if (st.live)
        rdzv_port_holders_name(&st, port, holder, sizeof holder);
    else
        snprintf(holder, sizeof holder, "a socket bound to it that neither listens nor "
                 "connects (so /proc/net/tcp does not show it)");
    snprintf(err, errlen, "cannot reserve port %d: it is held by %s. Stop that process, or "
             "give this group other ports (rdzvd --port-base/--port-limit, and the same "
             "--port-range here)", port, holder);
    return -1;
}

/* Waits up to a second for a signal that ends the agent; true if one came. */
static bool s_interrupted(const s_agent_t *self, int ms)
{
    struct pollfd p = { .fd = self->sig_fd, .events = POLLIN };
    return poll(&p, 1, ms) > 0;
}

/* Reserves every plan port. A port in TIME_WAIT only (a socket closed
 * before the agent ran) frees itself within a minute or so: the agent
 * retries, says which ports it waits for every 5 s, and gives up after
 * --reserve-wait. Any other holder ends the agent at once; the
 * reservation is never weakened with SO_REUSEADDR, which would let any
 * SO_REUSEADDR listener in beside it. */
static int s_reserve_plan(s_agent_t *self, const rdzv_assignment_t *a)
{
    self->nplan = rdzv_assignment_port_count(a);
    self->plan = calloc(self->nplan + 1, sizeof(int));
    self->reservations = calloc(self->nplan + 1, sizeof(int));
    self->locks = calloc(self->nplan + 1, sizeof(int));
    if (!self->plan || !self->reservations || !self->locks)
        return s_fatal(self, 1, "out of memory"), -1;
    for (size_t i = 0; i < self->nplan; i++) {
        self->reservations[i] = self->locks[i] = -1;
        self->plan[i] = rdzv_assignment_port(a, i);
    }
    int64_t start = rdzv_now_ms(), next_line = start;
    for (;;) {
        char err[1024], waiting[256] = "";
        size_t nwait = 0;
        int tw = 0;
        for (size_t i = 0; i < self->nplan; i++) {
            if (self->reservations[i] >= 0)
                continue;
            int bind_errno = 0, port = self->plan[i];
            self->reservations[i] = rdzv_reserve_port(port, &self->locks[i], &bind_errno, err,
                                                      sizeof err);
            if (self->reservations[i] >= 0)
                continue;
            int port_tw = 0;
            if (bind_errno != EADDRINUSE || s_why_in_use(port, &port_tw, err, sizeof err) < 0)
                return s_fatal(self, 1, err), -1;
            tw += port_tw;
            size_t used = strlen(waiting);
            if (used < sizeof waiting - 16)
                snprintf(waiting + used, sizeof waiting - used, "%s%d", nwait ? " " : "", port);
            nwait++;
        }
        if (!nwait)
            return s_check_beside(self, err, sizeof err) == 0 ? 0 : (s_fatal(self, 1, err), -1);
        int64_t now = rdzv_now_ms();
        if (now - start >= (int64_t) self->opts.reserve_wait_s * 1000) {
            snprintf(err, sizeof err, "cannot reserve port%s %s: still in use after "
                     "--reserve-wait %d s (%d socket%s in TIME_WAIT, no live one)", nwait > 1 ? "s" : "", waiting,
                     self->opts.reserve_wait_s, tw, tw == 1 ? "" : "s");
            return s_fatal(self, 1, err), -1;
        }
        if (now >= next_line) {
            next_line = now + 5000;
            fprintf(stderr, "rdzv agent: waiting for port%s %s to leave TIME_WAIT (%d socket%s "
                    "closed before this agent ran); %lld s of --reserve-wait %d s\n",
                    nwait > 1 ? "s" : "", waiting, tw, tw == 1 ? "" : "s",
                    (long long) ((now - start) / 1000), self->opts.reserve_wait_s);
        }
        if (s_interrupted(self, 1000))
            return s_fatal(self, 1, "interrupted while waiting for the plan's ports"), -1;
    }
}

/* --shim, else the shim of the build tree this rdzv was built in, else the
 * one installed beside this rdzv (wherever the tree was unpacked), else the
 * configured install path. */
static const char *s_shim_path(const rdzv_agent_opts_t *opts)
{
    if (opts->shim_path && *opts->shim_path)
        return opts->shim_path;
    static char path[PATH_MAX];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t root = strlen(RDZV_BUILD_ROOT);
    if (n > 0 && (size_t) n > root && strncmp(exe, RDZV_BUILD_ROOT "/", root + 1) == 0)
        return RDZV_SHIM_BUILD_PATH;
    if (rdzv_path_beside_exe(RDZV_SHIM_FROM_BINDIR, path, sizeof path) == 0
        && access(path, R_OK) == 0)
        return path;
    return RDZV_SHIM_INSTALL_PATH;
}

/* argv run with an assignment's KEY=VALUE lines in its environment (CMD's);
 * its pid, or -1. */
static pid_t s_spawn_text(s_agent_t *self, const char *text, char **argv)
{
    rdzv_agent_child_env_t spec = {
        .assignment_env = text ? text : "", .shim_path = s_shim_path(&self->opts),
        .socket_path = self->opts.socket_path,
        .range_base = self->range_base, .range_limit = self->range_limit };
    char **env = rdzv_agent_child_environ(&spec);
    if (!env)
        return -1;
    pid_t pid = rdzv_agent_child_spawn(argv, env);
    rdzv_agent_child_environ_free(&env);
    return pid;
}

static pid_t s_spawn(s_agent_t *self, const rdzv_assignment_t *a, char **argv)
{
    char *text = rdzv_agent_cli_env(a, self->opts.server);
    pid_t pid = text ? s_spawn_text(self, text, argv) : -1;
    free(text);
    return pid;
}

static void s_start_child(s_agent_t *self, const rdzv_assignment_t *a)
{
    self->child = s_spawn(self, a, self->opts.cmd);
    if (self->child < 0)
        s_fatal(self, 1, "cannot start CMD");
}

/* --elastic: the group moved to a new epoch and CMD runs on; it is told
 * with its signal and/or the hook command, which runs with the new
 * epoch's environment (reaped with the other children, s_on_signal). */
static void s_tell_engine(s_agent_t *self, const rdzv_assignment_t *a)
{
    int64_t epoch = rdzv_assignment_epoch(a);
    if (self->opts.on_epoch_signal && self->child > 0) {
        kill(self->child, self->opts.on_epoch_signal);
        fprintf(stderr, "rdzv agent: epoch %lld (world %d): sent CMD signal %d\n",
                (long long) epoch, rdzv_assignment_world(a), self->opts.on_epoch_signal);
    }
    if (self->opts.on_epoch_exec) {
        char *argv[] = { "/bin/sh", "-c", (char *) self->opts.on_epoch_exec, NULL };
        pid_t pid = s_spawn(self, a, argv);
        fprintf(stderr, "rdzv agent: epoch %lld (world %d): %s --on-epoch-exec (pid %d)\n",
                (long long) epoch, rdzv_assignment_world(a), pid > 0 ? "ran" : "cannot run",
                (int) pid);
    }
}

/* Not --elastic: CMD runs with the old epoch's ranks, ports and NCCL IDs,
 * which the other ranks have left. --restart starts it again in the new
 * epoch; otherwise the agent stops it and exits, leaving its session for
 * the next agent, which then joins this epoch rather than moving the group
 * again (and every other rank's CMD with it). */
static void s_epoch_moved(s_agent_t *self, const rdzv_assignment_t *a, int64_t from)
{
    if (self->opts.restart) {
        fprintf(stderr, "rdzv agent: group %s moved from epoch %lld to %lld (a rank restarted, "
                "or the group was resized): restarting CMD in epoch %lld (--restart)\n",
                self->opts.group, (long long) from, (long long) self->epoch,
                (long long) self->epoch);
        bool stopping = self->restart_env != NULL;
        free(self->restart_env);
        self->restart_env = rdzv_agent_cli_env(a, self->opts.server);
        if (!stopping)
            kill(self->child, SIGTERM);
        return;
    }
    char why[400];
    snprintf(why, sizeof why, "group %s moved from epoch %lld to %lld (a rank restarted, or "
             "the group was resized) and CMD still runs in epoch %lld: stopping it, exit %d "
             "(--restart would restart it in the new epoch, --elastic keep it running)",
             self->opts.group, (long long) from, (long long) self->epoch, (long long) from,
             RDZV_AGENT_EXIT_EPOCH);
    s_save_session(self);
    s_fatal(self, RDZV_AGENT_EXIT_EPOCH, why);
}

/* --restart: the old CMD has gone; the new one gets a plan free of its
 * leases and the new epoch's environment. */
static void s_restart_child(s_agent_t *self)
{
    rdzv_agent_serve_reset(self->serve);
    self->child = s_spawn_text(self, self->restart_env, self->opts.cmd);
    free(self->restart_env);
    self->restart_env = NULL;
    if (self->child < 0)
        s_fatal(self, 1, "cannot restart CMD");
}

static void s_on_health(void *arg, int serving)
{
    rdzv_agent_control_set_serving(arg, serving);
}

/* The engine serves its API on the plan's api port, on 127.0.0.1: CMD, or
 * in sidecar mode the engine beside the agent (another container of the
 * Pod shares its network). Its answers ride on the heartbeats; without an
 * api port (an older rdzvd) nothing is said. */
static void s_start_health(s_agent_t *self, const rdzv_assignment_t *a)
{
    int port = rdzv_assignment_api_port(a);
    if (self->health || self->opts.health_interval_s <= 0 || port <= 0)
        return;
    char err[256];
    self->health = rdzv_agent_health_start(port, self->opts.health_path,
                                           self->opts.health_interval_s * 1000, s_on_health,
                                           self->control, err, sizeof err);
    if (!self->health)
        fprintf(stderr, "rdzv agent: no health checks of CMD's engine: %s\n", err);
}

/* The first assignment: reserve, write PATH.env, open the socket, start CMD. */
static void s_start(s_agent_t *self, const rdzv_assignment_t *a)
{
    rdzv_agent_cli_progress_stop(&self->progress);
    s_read_range(self, a);
    self->epoch = rdzv_assignment_epoch(a);
    if (s_reserve_plan(self, a) < 0)
        return;
    rdzv_lease_t *lease = rdzv_lease_new(self->range_base, self->range_limit,
                                         self->plan, self->nplan);
    if (!lease)
        { s_fatal(self, 1, "the plan lies outside the managed range (see --port-range)"); return; }
    if (s_write_env_file(self, a) < 0) {
        rdzv_lease_destroy(&lease);
        { s_fatal(self, 1, "cannot write the env file"); return; }
    }
    char err[256];
    rdzv_agent_serve_args_t args = {
        .path = self->opts.socket_path, .allow_uids = self->opts.allow_uids,
        .n_allow_uids = self->opts.n_allow_uids, .reset_when_idle = !self->opts.cmd,
        .epoch = rdzv_assignment_epoch(a) };
    self->serve = rdzv_agent_serve_new(&args, &lease, err, sizeof err);
    rdzv_lease_destroy(&lease);
    if (!self->serve)
        { s_fatal(self, 1, err); return; }
    fprintf(stderr, "rdzv agent: serving %s, ports %d..%d reserved\n", self->opts.socket_path,
            self->nplan ? self->plan[0] : 0, self->nplan ? self->plan[self->nplan - 1] : 0);
    /* From now on an engine may run with this assignment: a later agent must
     * join under a session of its own, as a restarted rank does. */
    unlink(self->session_path);
    if (self->opts.cmd)
        s_start_child(self, a);
    s_start_health(self, a);
}

/* A later assignment must keep the plan: a new one means rdzvd laid the
 * group out afresh (it was deleted in between), and the reserved block may
 * already be another group's. Serving either is unsafe: fail as refused. */
static void s_update(s_agent_t *self, const rdzv_assignment_t *a)
{
    size_t n = rdzv_assignment_port_count(a);
    bool same = n == self->nplan;
    for (size_t i = 0; same && i < self->nplan; i++)
        same = rdzv_assignment_port(a, i) == self->plan[i];
    if (!same) {
        char why[256];
        snprintf(why, sizeof why, "rdzvd moved group %s rank %d to ports %d..%d, not the "
                 "reserved %d..%d (the group was deleted?); releasing them", self->opts.group,
                 self->opts.rank, n ? rdzv_assignment_port(a, 0) : 0,
                 n ? rdzv_assignment_port(a, n - 1) : 0, self->nplan ? self->plan[0] : 0,
                 self->nplan ? self->plan[self->nplan - 1] : 0);
        s_fatal(self, RDZV_AGENT_EXIT_REFUSED, why);
        return;
    }
    int64_t from = self->epoch;
    self->epoch = rdzv_assignment_epoch(a);
    rdzv_agent_serve_set_epoch(self->serve, self->epoch);
    s_write_env_file(self, a);
    if (from == self->epoch)
        return;
    if (self->opts.elastic)
        s_tell_engine(self, a);
    else if (self->child > 0)
        s_epoch_moved(self, a, from);
}

static void s_on_control(s_agent_t *self)
{
    int code = 0;
    char err[256] = "";
    rdzv_assignment_t *a = rdzv_agent_control_take(self->control, &code, err, sizeof err);
    if (code)
        { s_fatal(self, code, err); return; }
    if (self->draining && rdzv_agent_control_drained(self->control))
        s_drain_end(self);
    if (!a)
        return;
    if (!self->serve)
        s_start(self, a);
    else
        s_update(self, a);
    rdzv_assignment_destroy(&a);
}

static void s_on_signal(s_agent_t *self)
{
    struct signalfd_siginfo si;
    while (read(self->sig_fd, &si, sizeof si) == (ssize_t) sizeof si) {
        int sig = (int) si.ssi_signo;
        if (sig == SIGCHLD) {
            /* CMD, or an --on-epoch-exec hook, which is only logged. */
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                if (pid != self->child) {
                    fprintf(stderr, "rdzv agent: --on-epoch-exec (pid %d) exited %d\n",
                            (int) pid, code);
                    continue;
                }
                self->child = 0;
                if (self->restart_env) {
                    s_restart_child(self);
                    continue;
                }
                self->done = true;
                self->exit_code = code;
            }
        } else if (self->child > 0) {
            /* A signal to stop CMD while it restarts: its exit ends the agent. */
            if (sig != SIGHUP) {
                free(self->restart_env);
                self->restart_env = NULL;
            }
            /* With a router, the rank leaves it before its engine stops:
             * requests in flight finish, no new one is sent there. The
             * SIGTERM waits for the drain's end; a second one goes at once. */
            if (sig == SIGTERM && self->opts.router && !self->drained && !self->drain_signal) {
                self->drain_signal = sig;
                s_drain_start(self);
                continue;
            }
            if (sig == self->drain_signal)
                self->drain_signal = 0;
            kill(self->child, sig);
        } else {
            self->done = true;
            self->exit_code = self->opts.cmd ? 128 + sig : 0;
        }
    }
}

/* Sidecar mode: the engine's last process has gone. An engine that started
 * in the current epoch failed or was stopped on its own, and the group needs
 * a new epoch: join again under a new session, and take PATH.env away until
 * that epoch has formed, so that no engine starts from the finished one. An
 * engine that started in an earlier epoch was restarted because the group
 * moved on (another rank's engine went); a new epoch then would restart
 * every other rank's engine again, without end. */
static void s_on_engine_gone(s_agent_t *self, int64_t started_epoch)
{
    /* A drain was for that engine (its stop hook's): the next one starts
     * undrained, and is registered again once it serves. */
    if (self->draining)
        s_drain_end(self);
    if (self->drained) {
        rdzv_agent_control_undrain(self->control);
        self->drained = false;
    }
    int64_t now = self->epoch;
    if (started_epoch < now) {
        fprintf(stderr, "rdzv agent: the engine of epoch %lld has gone; its ports return to "
                "the plan, and the next engine joins epoch %lld\n",
                (long long) started_epoch, (long long) now);
        return;
    }
    fprintf(stderr, "rdzv agent: the engine has gone; its ports return to the plan, and the "
            "group moves to a new epoch\n");
    unlink(self->env_path);
    rdzv_agent_control_rejoin(self->control);
}

/* Puts the plan's locks at pfd; how many. */
static size_t s_lock_pollfds(const s_agent_t *self, struct pollfd *pfd)
{
    size_t n = 0;
    for (size_t i = 0; self->locks && i < self->nplan; i++)
        if (self->locks[i] >= 0)
            pfd[n++] = (struct pollfd) { .fd = self->locks[i], .events = POLLIN };
    return n;
}

/* Retakes the locks the agent went on without (a squatter of another uid
 * held them); whether any is still missing. */
static bool s_retake_locks(s_agent_t *self)
{
    bool missing = false;
    for (size_t i = 0; self->locks && i < self->nplan; i++) {
        if (self->locks[i] != RDZV_RESERVE_NO_LOCK)
            continue;
        int fd = rdzv_reserve_lock_retake(self->plan[i]);
        if (fd >= 0)
            self->locks[i] = fd;
        else
            missing = true;
    }
    return missing;
}

/* PATH.drain appeared (agent_drain.h): the engine is about to stop. The
 * heartbeats say it no longer serves, the router lets the rank go, then
 * the file goes, which the engine's stop hook waits for; the agent serves
 * its shims meanwhile. */
static void s_on_drain_file(s_agent_t *self)
{
    if (!rdzv_agent_drain_watch_asked(self->drain_watch) || self->drain_file)
        return;
    fprintf(stderr, "rdzv agent: %s asks for a drain\n", self->opts.socket_path);
    self->drain_file = true;
    if (self->drained)
        s_drain_end(self);           /* drained already: the file goes at once */
    else
        s_drain_start(self);
}

static void s_loop(s_agent_t *self)
{
    /* The signal, rdzvd, PATH.drain's directory, the socket and its
     * connections, the plan's locks. */
    struct pollfd *pfd = calloc(AGENT_MAX_POLL + self->nplan, sizeof *pfd);
    if (!pfd)
        { s_fatal(self, 1, "out of memory"); return; }
    while (!self->done) {
        pfd[0] = (struct pollfd) { .fd = self->sig_fd, .events = POLLIN };
        pfd[1] = (struct pollfd) { .fd = rdzv_agent_control_fd(self->control), .events = POLLIN };
        pfd[2] = (struct pollfd) { .fd = rdzv_agent_drain_watch_fd(self->drain_watch),
                                   .events = POLLIN };
        size_t first = 3, n = first, nlocks;
        if (self->serve)
            n += rdzv_agent_serve_pollfds(self->serve, pfd + n, AGENT_MAX_POLL - n);
        nlocks = s_lock_pollfds(self, pfd + n);
        /* A lock still squatted is tried again every second; a drain
         * rdzvd never answers ends at its own time. */
        int timeout = s_retake_locks(self) ? RETAKE_LOCK_MS : -1;
        if (self->draining) {
            int64_t left = self->drain_until_ms - s_mono_ms();
            if (left <= 0) {
                s_drain_end(self);
                continue;
            }
            timeout = timeout < 0 || left < timeout ? (int) left : timeout;
        }
        if (poll(pfd, n + nlocks, timeout) < 0) {
            if (errno == EINTR)
                continue;
            { s_fatal(self, 1, "poll failed"); break; }
        }
        for (size_t i = n; i < n + nlocks; i++)
            if (pfd[i].revents)
                rdzv_reserve_lock_answer(pfd[i].fd);
        if (pfd[0].revents)
            s_on_signal(self);
        if (pfd[1].revents)
            s_on_control(self);
        if (pfd[2].revents)
            s_on_drain_file(self);
        if (self->serve && n > first) {
            rdzv_agent_serve_handle(self->serve, pfd + first, n - first);
            int64_t started;
            if (rdzv_agent_serve_take_engine_gone(self->serve, &started))
                s_on_engine_gone(self, started);
        }
    }
    free(pfd);
}

static void s_cleanup(s_agent_t *self)
{
    rdzv_agent_cli_progress_stop(&self->progress);
    rdzv_agent_health_stop(&self->health);
    rdzv_agent_drain_watch_destroy(&self->drain_watch);
    rdzv_agent_serve_destroy(&self->serve);
    if (self->env_path)
        unlink(self->env_path);
    for (size_t i = 0; self->reservations && i < self->nplan; i++) {
        if (self->reservations[i] >= 0)
            close(self->reservations[i]);
        if (self->locks[i] >= 0)
            close(self->locks[i]);
    }
    free(self->reservations);
    free(self->locks);
    free(self->plan);
    free(self->env_path);
    free(self->session_path);
    free(self->restart_env);
    rdzv_agent_control_destroy(&self->control);
    if (self->sig_fd >= 0)
        close(self->sig_fd);
}

/* The first join's session. An agent that joined and then failed before it
 * served (a plan port it could not reserve), or that stopped CMD because
 * the group moved on, leaves its session in PATH.session, and the next one
 * resumes it: no engine runs with this rank's session in the group's
 * epoch, so the group need not move to a new one. */
static int s_first_session(s_agent_t *self)
{
    if (rdzv_agent_session_load(self->session_path, self->session, sizeof self->session)) {
        fprintf(stderr, "rdzv agent: resuming the session of the agent before (%s): it did "
                "not get to serve, or stopped CMD at an epoch move\n", self->session_path);
        return 0;
    }
    unsigned char raw[16];
    if (rdzv_random_bytes(raw, sizeof raw) != 0)
        return -1;
    rdzv_hex_encode(raw, sizeof raw, self->session);
    s_save_session(self);
    return 0;
}

static int s_init(s_agent_t *self)
{
    if (rdzv_agent_check_socket_dir(self->opts.socket_path) < 0)
        return -1;
    self->env_path = rdzv_agent_beside_socket(self->opts.socket_path, RDZV_AGENT_ENV_SUFFIX);
    self->session_path = rdzv_agent_beside_socket(self->opts.socket_path, RDZV_AGENT_SESSION_SUFFIX);
    if (!self->env_path || !self->session_path || s_first_session(self) < 0)
        return -1;
    char why[300];
    if (!(self->drain_watch = rdzv_agent_drain_watch_new(self->opts.socket_path, why,
                                                         sizeof why))) {
        fprintf(stderr, "rdzv agent: %s\n", why);
        return -1;
    }
    sigset_t mask;
    sigemptyset(&mask);
    /* Every signal whose default would end the agent without cleanup. */
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIGCHLD);
    /* Blocked before the rdzvd thread starts, so that only signalfd sees them. */
    sigprocmask(SIG_BLOCK, &mask, NULL);
    self->sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (self->sig_fd < 0)
        return -1;
    char err[256];
    rdzv_agent_control_args_t args = {
        .endpoint = self->opts.server,
        .join = { .group = self->opts.group, .world = self->opts.world,
                  .rank = self->opts.rank, .host = self->opts.host, .node = self->opts.node,
                  .timeout_ms = self->opts.timeout_s * 1000 },
        .heartbeat_ms = self->opts.heartbeat_s * 1000, .first_session = self->session,
        .router = self->opts.router, .drain_timeout_ms = self->opts.drain_timeout_s * 1000 };
    self->control = rdzv_agent_control_new(&args, err, sizeof err);
    if (!self->control) {
        fprintf(stderr, "rdzv agent: %s\n", err);
        return -1;
    }
    self->progress = rdzv_agent_cli_progress_start(self->opts.server, self->opts.group,
                                                   self->opts.timeout_s * 1000);
    return 0;
}

int rdzv_agent_main(int argc, char **argv)
{
    s_agent_t self = { .sig_fd = -1 };
    char err[256];
    if (rdzv_agent_opts_parse(&self.opts, argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "rdzv agent: %s\n", err);
        return 2;
    }
    if (self.opts.help) {
        rdzv_agent_opts_usage();
        return 0;
    }
    if (s_init(&self) < 0) {
        s_cleanup(&self);
        return 1;
    }
    s_loop(&self);
    /* CMD ended: rdzvd hears at once that this rank's engine no longer
     * serves (and its router, if any, drops it), rather than serving on
     * until --dead-after. A second is all it waits for. */
    if (self.opts.cmd && self.child == 0 && self.opts.health_interval_s > 0 && !self.drained
        && !self.draining)
        rdzv_agent_control_drain(self.control, S_FAREWELL_MS);
    if (self.child > 0) {
        kill(self.child, SIGTERM);
        waitpid(self.child, NULL, 0);
    }
    s_cleanup(&self);
    return self.exit_code;
}
