/* rdzv keygen PATH: a CURVE key pair in czmq's certificate format, the
 * public certificate at PATH and the secret one at PATH_secret, so that a
 * directory of public certificates is what rdzvd --clients reads. */
#include "cli.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void s_usage(FILE *out)
{
    fprintf(out, "Usage: rdzv keygen PATH\n\n"
                 "Writes a CURVE key pair: the public certificate at PATH, the secret one\n"
                 "at PATH_secret (mode 0600). Give rdzvd --curve-secret SERVER_secret and\n"
                 "--clients DIR (a directory of client public certificates); give clients\n"
                 "RDZV_CURVE_SERVER_PUBLIC=SERVER and RDZV_CURVE_SECRET=CLIENT_secret.\n");
}

int cli_keygen_main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_usage(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        s_usage(stderr);
        return 2;
    }
    zsys_handler_set(NULL);
    zcert_t *cert = zcert_new();
    char secret[4096];
    snprintf(secret, sizeof secret, "%s_secret", argv[1]);
    int rc = cert ? zcert_save(cert, argv[1]) : -1;
    zcert_destroy(&cert);
    if (rc != 0 || chmod(secret, 0600) != 0) {
        fprintf(stderr, "rdzv keygen: cannot write %s and %s\n", argv[1], secret);
        return 1;
    }
    printf("%s\n%s\n", argv[1], secret);
    return 0;
}
