/* rdzv nccl-id decode HEX: where an NCCL unique ID's bootstrap root listens,
 * for humans (common/nccl_id.h does the decoding; no NCCL needed). */
#include "cli.h"

#include "nccl_id.h"
#include "rdzv_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define S_CMD "nccl-id"

static const char s_usage[] =
    "Usage: rdzv nccl-id decode [--layout auto|2.21|2.29] HEX|-\n"
    "\n"
    "Decodes an NCCL unique ID (256 hex characters, as in RDZV_NCCL_UNIQUE_ID\n"
    "or an assignment's nccl_unique_id; '-' reads it from stdin) and prints\n"
    "its magic, address family, address and port: where NCCL's bootstrap root\n"
    "listens. NCCL 2.29 IDs also carry the number of ranks.\n"
    "\n"
    "  --layout L  the NCCL layout: 2.21 (2.21 to 2.28), 2.29, or auto (default:\n"
    "              2.29 when the rank count is set, else 2.21)\n"
    "  -h, --help  this help\n"
    "\n"
    "Exit: 0 a well-formed ID, 1 malformed (what could be read is still\n"
    "printed, with a 'problem' line), 2 usage.\n";

enum { S_LAYOUT = 256 };

static const struct option s_options[] = {
    { "layout", required_argument, NULL, S_LAYOUT },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

static int s_layout(const char *text, int *out)
{
    if (strcmp(text, "auto") == 0)
        *out = RDZV_NCCL_LAYOUT_AUTO;
    else if (strcmp(text, "2.21") == 0 || strcmp(text, "2.21-2.28") == 0)
        *out = RDZV_NCCL_LAYOUT_2_21;
    else if (strcmp(text, "2.29") == 0)
        *out = RDZV_NCCL_LAYOUT_2_29;
    else
        return cli_usage_error(S_CMD, "--layout must be auto, 2.21 or 2.29, not '%s'", text);
    return 0;
}

/* The hex text, from the argument or stdin, trimmed of spaces and newlines. */
static int s_read_hex(const char *arg, char *buf, size_t len)
{
    if (strcmp(arg, "-") == 0) {
        size_t n = fread(buf, 1, len - 1, stdin);
        buf[n] = '\0';
    } else if (strlen(arg) < len) {
        strcpy(buf, arg);
    } else {
        return -1;
    }
    char *start = buf;
    while (isspace((unsigned char) *start))
        start++;
    size_t n = strlen(start);
    while (n > 0 && isspace((unsigned char) start[n - 1]))
        n--;
    memmove(buf, start, n);
    buf[n] = '\0';
    return 0;
}

static int s_decode(const char *arg, int layout)
{
    char hex[2 * RDZV_NCCL_ID_HEX];
    unsigned char raw[RDZV_NCCL_ID_BYTES];
    if (s_read_hex(arg, hex, sizeof hex) != 0 || strlen(hex) != RDZV_NCCL_ID_HEX
        || rdzv_hex_decode(hex, raw, sizeof raw) != 0)
        return cli_usage_error(S_CMD, "an NCCL unique ID is %d hex characters (%d bytes)",
                               RDZV_NCCL_ID_HEX, RDZV_NCCL_ID_BYTES);
    rdzv_nccl_id_info_t info;
    int rc = rdzv_nccl_id_decode(raw, &info, layout);
    if (rc != 0 && errno != EBADMSG) {
        fprintf(stderr, "rdzv %s: cannot decode: %s\n", S_CMD, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    char text[RDZV_NCCL_ID_FORMAT_MAX];
    if (rdzv_nccl_id_format(&info, text, sizeof text) < 0) {
        fprintf(stderr, "rdzv %s: cannot format the ID: %s\n", S_CMD, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    fputs(text, stdout);
    if (fflush(stdout) != 0)
        return CLI_EXIT_ERROR;
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
}

int cli_nccl_main(int argc, char **argv)
{
    int layout = RDZV_NCCL_LAYOUT_AUTO;
    if (argc < 2 || strcmp(argv[1], "decode") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        return cli_usage_error(S_CMD, "the only subcommand is 'decode'");
    }
    argc--;
    argv++;
    int c;
    while ((c = cli_getopt(S_CMD, argc, argv, ":h", s_options)) != -1) {
        if (c == CLI_OPT_BAD)
            return CLI_EXIT_USAGE;
        if (c == 'h') {
            fputs(s_usage, stdout);
            return CLI_EXIT_OK;
        }
        if (c == S_LAYOUT && s_layout(optarg, &layout) != 0)
            return CLI_EXIT_USAGE;
    }
    if (optind != argc - 1)
        return cli_usage_error(S_CMD, "decode takes one ID");
    return s_decode(argv[optind], layout);
}
