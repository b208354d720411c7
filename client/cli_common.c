/* Helpers every rdzv command uses. */
#include "cli.h"

#include "env_text.h"
#include "rdzv_proto.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_getopt(const char *cmd, int argc, char **argv, const char *optstring,
               const struct option *longopts)
{
    opterr = 0;     /* our own messages name the command */
    int c = getopt_long(argc, argv, optstring, longopts, NULL);
    if (c == ':')
        cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
    else if (c == '?' && optopt)
        cli_usage_error(cmd, "unknown option '-%c'", optopt);
    else if (c == '?')
        cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    return c == ':' || c == '?' ? CLI_OPT_BAD : c;
}

const char *cli_value(const char *flag, const char *env_name, const char *fallback)
{
    if (flag)
        return flag;
    const char *env = env_name ? getenv(env_name) : NULL;
    return env && *env ? env : fallback;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "rdzv %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'rdzv %s --help'.\n", cmd);
    return CLI_EXIT_USAGE;
}

int cli_parse_long(const char *cmd, const char *what, const char *text,
                   long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end != '\0' || errno != 0 || v < min || v > max)
        return cli_usage_error(cmd, "%s must be an integer in %ld..%ld, not '%s'",
                               what, min, max, text ? text : "");
    *out = v;
    return 0;
}

int cli_parse_seconds(const char *cmd, const char *what, const char *text, int *ms_out)
{
    char *end = NULL;
    errno = 0;
    double sec = text ? strtod(text, &end) : 0;
    double max_sec = RDZV_MAX_TIMEOUT_MS / 1000.0;
    if (!text || end == text || *end != '\0' || errno != 0 || !isfinite(sec)
        || sec <= 0 || sec > max_sec)
        return cli_usage_error(cmd, "%s must be seconds in (0, %.0f], not '%s'",
                               what, max_sec, text ? text : "");
    long ms = lround(sec * 1000.0);
    *ms_out = ms < 1 ? 1 : (int) ms;
    return 0;
}

/* czmq's zconfig prints a certificate's parse error on stdout (through
 * zclock_log, whatever zsys is told), where join, status and kv print
 * what scripts read; while librdzv loads the certificates, stdout is
 * stderr. Commands connect before they start threads of their own. */
static rdzv_client_t *s_client_new(const char *server, char *err, size_t errlen)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    if (saved >= 0)
        dup2(STDERR_FILENO, STDOUT_FILENO);
    rdzv_client_t *client = rdzv_client_new(server, NULL, err, errlen);
    if (saved >= 0) {
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    return client;
}

rdzv_client_t *cli_connect(const char *cmd, const char *server, int timeout_ms, int *exit_out)
{
    char err[256];
    rdzv_client_t *client = s_client_new(server, err, sizeof err);
    if (client) {
        if (timeout_ms > 0)
            rdzv_client_set_request_timeout(client, timeout_ms);
        return client;
    }
    if (errno == EACCES) {
        *exit_out = cli_security_error(cmd, err);
    } else if (errno == EINVAL) {
        *exit_out = cli_usage_error(cmd, "--server (or RDZV_SERVER): %s", err);
    } else {
        fprintf(stderr, "rdzv %s: %s\n", cmd, err);
        *exit_out = CLI_EXIT_ERROR;
    }
    return NULL;
}

int cli_result(const char *cmd, const rdzv_client_t *client, int rc)
{
    switch (rc) {
    case RDZV_OK:
        return CLI_EXIT_OK;
    case RDZV_ERR_REFUSED:
        fprintf(stderr, "rdzv: %s: %s\n", rdzv_client_error_code(client),
                rdzv_client_error(client));
        return CLI_EXIT_REFUSED;
    case RDZV_ERR_TIMEOUT:
        fprintf(stderr, "rdzv %s: timed out: %s\n", cmd, rdzv_client_error(client));
        return CLI_EXIT_TIMEOUT;
    case RDZV_ERR_USAGE:
        return cli_usage_error(cmd, "%s", rdzv_client_error(client));
    default:
        fprintf(stderr, "rdzv %s: %s\n", cmd, rdzv_client_error(client));
        return CLI_EXIT_ERROR;
    }
}

char *cli_assignment_env(const rdzv_assignment_t *asg, const char *server)
{
    char *assigned = rdzv_assignment_env(asg), *env = NULL;
    size_t len = 0;
    FILE *f = assigned ? open_memstream(&env, &len) : NULL;
    if (!f) {
        free(assigned);
        return NULL;
    }
    bool ok = fputs(assigned, f) != EOF && rdzv_env_put(f, "RDZV_SERVER", server, false) == 0;
    free(assigned);
    if (fclose(f) != 0 || !ok) {
        free(env);
        return NULL;
    }
    return env;
}

int cli_env_print_export(const char *env)
{
    char *copy = strdup(env), *save = NULL;
    if (!copy)
        return -1;
    int rc = 0;
    for (char *line = strtok_r(copy, "\n", &save); line && rc == 0;
         line = strtok_r(NULL, "\n", &save)) {
        char *key, *value;
        if (!rdzv_env_split(line, &key, &value))
            continue;
        rc = fputs("export ", stdout) == EOF ? -1 : rdzv_env_put(stdout, key, value, true);
    }
    free(copy);
    return rc;
}

int cli_env_apply(char *env)
{
    char *save = NULL;
    for (char *line = strtok_r(env, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *key, *value;
        if (rdzv_env_split(line, &key, &value) && setenv(key, value, 1) != 0)
            return -1;
    }
    return 0;
}
