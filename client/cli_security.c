/* Options every command takes, wherever they stand before a "--": they name
 * files, and are handed to librdzv through the environment it reads, so
 * the agent and the programs it starts see the same settings. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *flag;
    const char *env;
} s_flags[] = {
    { "--curve-server-public", "RDZV_CURVE_SERVER_PUBLIC" },
    { "--curve-secret", "RDZV_CURVE_SECRET" },
    { "--group-token", "RDZV_GROUP_TOKEN" },
};

/* Value of argv[*i] if it is one of the flags ("--flag V" or "--flag=V"),
 * advancing *i past it; NULL otherwise. */
static const char *s_match(int argc, char **argv, int *i, size_t *which, int *bad)
{
    for (size_t f = 0; f < sizeof s_flags / sizeof s_flags[0]; f++) {
        size_t n = strlen(s_flags[f].flag);
        if (strncmp(argv[*i], s_flags[f].flag, n) != 0)
            continue;
        *which = f;
        if (argv[*i][n] == '=')
            return argv[(*i)++] + n + 1;
        if (argv[*i][n] != '\0')
            continue;
        if (*i + 1 >= argc) {
            *bad = 1;
            return NULL;
        }
        *i += 2;
        return argv[*i - 1];
    }
    return NULL;
}

int cli_take_security_options(int *argc, char **argv)
{
    int out = 1, i = 1;
    while (i < *argc) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        size_t which = 0;
        int bad = 0;
        const char *value = s_match(*argc, argv, &i, &which, &bad);
        if (bad) {
            fprintf(stderr, "rdzv: %s needs a FILE\n", s_flags[which].flag);
            return -1;
        }
        if (value)
            setenv(s_flags[which].env, value, 1);
        else
            argv[out++] = argv[i++];
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

int cli_security_error(const char *cmd, const char *err)
{
    for (size_t f = 0; f < sizeof s_flags / sizeof s_flags[0]; f++) {
        size_t n = strlen(s_flags[f].env);
        if (strncmp(err, s_flags[f].env, n) == 0 && err[n] == ':')
            return cli_usage_error(cmd, "%s (or %s)%s", s_flags[f].flag, s_flags[f].env,
                                   err + n);
    }
    return cli_usage_error(cmd, "%s", err);
}
