/* Shared pieces of the rdzv command line: exit codes, option parsing from
 * flags and environment, and turning library results into messages. */
#ifndef RDZV_CLI_H
#define RDZV_CLI_H

#include "rdzv.h"

#include <getopt.h>
#include <stdbool.h>

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_ERROR = 1,     /* local failure */
    CLI_EXIT_USAGE = 2,     /* bad flags or input */
    CLI_EXIT_TIMEOUT = 3,
    CLI_EXIT_REFUSED = 4,   /* the server answered with an error */
};

/* Lines of every command's --help, in its option list: --server (its
 * user includes rdzv_proto.h), and the options rdzv.c takes for every
 * command (cli_take_security_options). */
#define CLI_HELP_SERVER \
    "  --server EP[,EP...]      rdzvd: tcp://HOST:PORT, HOST:PORT or HOST (port\n" \
    "                           29400); a list: the replicas of an active/standby\n" \
    "                           rdzvd, tried in turn (RDZV_SERVER; default\n" \
    "                           " RDZV_DEFAULT_ENDPOINT ")\n"
#define CLI_HELP_SECURITY \
    "  --curve-server-public FILE  rdzvd's public certificate\n" \
    "                           (RDZV_CURVE_SERVER_PUBLIC; default: no CURVE)\n" \
    "  --curve-secret FILE      this client's secret certificate, its public key\n" \
    "                           in rdzvd's --clients (RDZV_CURVE_SECRET)\n" \
    "  --group-token FILE       the file holding the token of an rdzvd started\n" \
    "                           with --group-token (RDZV_GROUP_TOKEN; default:\n" \
    "                           none)\n"
/* How every command's --help says where options come from. */
#define CLI_HELP_VARIABLES \
    "A flag's variable is named with it; the flag wins over the variable.\n"

/* getopt_long's answer when the option was unknown or lacked its value
 * (already reported on stderr). */
#define CLI_OPT_BAD (-2)

/* Command entry points: argv[0] is the command's name ("join"). */
int cli_join_main(int argc, char **argv);
int cli_status_main(int argc, char **argv);
int cli_kv_main(int argc, char **argv);
int cli_group_main(int argc, char **argv);
int cli_nccl_main(int argc, char **argv);
int cli_keygen_main(int argc, char **argv);
/* Removes --curve-server-public, --curve-secret and --group-token FILE from
 * argv (up to a "--") and exports them as RDZV_CURVE_SERVER_PUBLIC,
 * RDZV_CURVE_SECRET and RDZV_GROUP_TOKEN. 0, or -1 after printing why. */
int cli_take_security_options(int *argc, char **argv);
/* Reports librdzv's "RDZV_X: reason" about a security file as a usage error
 * naming the flag too ("--group-token (or RDZV_GROUP_TOKEN): reason"). */
int cli_security_error(const char *cmd, const char *err);

/* getopt_long with the errors written as "rdzv CMD: ..."; returns the
 * option, -1 at the end, or CLI_OPT_BAD. optstring must start with ':'
 * (after an optional '+'). */
int cli_getopt(const char *cmd, int argc, char **argv, const char *optstring,
               const struct option *longopts);

/* flag if given, else the environment variable, else fallback. */
const char *cli_value(const char *flag, const char *env_name, const char *fallback);
/* The assignment's KEY=VALUE lines plus RDZV_SERVER=server, what rdzv join
 * and rdzv agent give CMD: its own rdzv calls (rdzv kv) then reach the
 * rdzvd the rank joined through. malloc'd; NULL out of memory. */
char *cli_assignment_env(const rdzv_assignment_t *asg, const char *server);
/* Prints env's lines as `export KEY='VALUE'` lines, for a shell's eval; 0
 * or -1 on a write error. */
int cli_env_print_export(const char *env);
/* Puts every KEY=VALUE line of env (quoting removed) into this process's
 * environment; env is cut up. 0, or -1 with errno. */
int cli_env_apply(char *env);

/* Prints "rdzv CMD: <message>" and a hint to --help; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parses an integer in [min, max]; what names the flag for the error
 * ("--world (or RDZV_WORLD)"). Returns 0 or CLI_EXIT_USAGE. */
int cli_parse_long(const char *cmd, const char *what, const char *text,
                   long min, long max, long *out);
/* Parses positive seconds (decimals allowed) into milliseconds. */
int cli_parse_seconds(const char *cmd, const char *what, const char *text, int *ms_out);

/* A client for server whose short requests give up after timeout_ms (<= 0:
 * the library's default); NULL after printing why (*exit_out set). */
rdzv_client_t *cli_connect(const char *cmd, const char *server, int timeout_ms, int *exit_out);
/* Prints the failure of rc (if any) and returns the exit code for it. */
int cli_result(const char *cmd, const rdzv_client_t *client, int rc);

/* A line on stderr every 5 s, until stopped, saying what a join of group
 * waits for (cli_progress.c); timeout_ms is the join's (0: the default).
 * NULL if it cannot start, which only costs the lines. */
typedef struct cli_progress cli_progress_t;
cli_progress_t *cli_progress_start(const char *cmd, const char *server, const char *group,
                                   int timeout_ms);
void cli_progress_stop(cli_progress_t **progress);

#endif
