/* Options of `rdzv agent`, from the command line and the environment. */
#ifndef RDZV_AGENT_OPTS_H
#define RDZV_AGENT_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define RDZV_AGENT_MAX_ALLOW_UIDS 16
#define RDZV_AGENT_DEFAULT_HEARTBEAT_S 5
#define RDZV_AGENT_DEFAULT_HEALTH_INTERVAL_S 2
#define RDZV_AGENT_DEFAULT_HEALTH_PATH "/health"
#define RDZV_AGENT_DEFAULT_DRAIN_TIMEOUT_S 30
#define RDZV_AGENT_DEFAULT_RESERVE_WAIT_S 90
/* The group moved to a new epoch under CMD (neither --elastic nor
 * --restart): CMD was stopped, and a supervisor may start the agent again. */
#define RDZV_AGENT_EXIT_EPOCH 5

typedef struct {
    const char *server;
    const char *group;
    int world;
    int rank;
    const char *host;
    const char *node;
    const char *socket_path;
    const char *shim_path;     /* NULL: the built or installed librdzv_shim.so */
    int timeout_s;             /* first join; 0: librdzv's default */
    int heartbeat_s;
    const char *health_path;   /* GET 127.0.0.1:API + this: CMD's engine serves (200) */
    int health_interval_s;     /* 0: no health checks */
    const char *router;        /* the group's router (router_url.h), NULL for none */
    int drain_timeout_s;       /* on SIGTERM, wait this long for the router to let go */
    /* --elastic: on an epoch move CMD keeps running and is told: sent
     * on_epoch_signal (0: none) and/or on_epoch_exec is run (NULL: none). */
    bool elastic;
    /* --restart: on an epoch move CMD is stopped and started again with the
     * new epoch's environment. Neither this nor elastic: CMD is stopped and
     * the agent exits RDZV_AGENT_EXIT_EPOCH. */
    bool restart;
    int on_epoch_signal;
    const char *on_epoch_exec;
    int reserve_wait_s;        /* how long a plan port may stay in TIME_WAIT */
    int range_base;
    int range_limit;
    uid_t allow_uids[RDZV_AGENT_MAX_ALLOW_UIDS];
    size_t n_allow_uids;
    char **cmd;                /* NULL-terminated, NULL without `-- CMD` */
    bool help;
} rdzv_agent_opts_t;

/* Fills opts from argv (argv[0] is "agent") and the environment; returns 0,
 * or -1 with the reason in err. */
int rdzv_agent_opts_parse(rdzv_agent_opts_t *opts, int argc, char **argv,
                          char *err, size_t errlen);
/* Parses "BASE-LIMIT"; returns 0 or -1. */
int rdzv_agent_parse_range(const char *text, int *base, int *limit);
/* A signal by name (HUP, SIGUSR1, ...) or number; -1 when it is neither (or
 * KILL or STOP, which no engine can act on). */
int rdzv_agent_parse_signal(const char *text);
void rdzv_agent_opts_usage(void);

#endif
