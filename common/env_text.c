#include "env_text.h"

#include <string.h>

/* Characters that mean nothing to a shell inside a word. */
static bool s_plain(const char *v)
{
    static const char extra[] = "_@%+=:,./-";
    for (; *v; v++) {
        unsigned char c = (unsigned char) *v;
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!alnum && !strchr(extra, c))
            return false;
    }
    return true;
}

/* value in single quotes, '\'' for a quote. */
static int s_quoted(FILE *f, const char *value)
{
    if (fputc('\'', f) == EOF)
        return -1;
    for (const char *v = value; *v; v++) {
        if (*v == '\'' ? fputs("'\\''", f) == EOF : fputc(*v, f) == EOF)
            return -1;
    }
    return fputc('\'', f) == EOF ? -1 : 0;
}

int rdzv_env_quote(FILE *f, const char *value)
{
    if (*value && s_plain(value))
        return fputs(value, f) == EOF ? -1 : 0;
    return s_quoted(f, value);
}

int rdzv_env_put(FILE *f, const char *key, const char *value, bool always)
{
    if (fprintf(f, "%s=", key) < 0)
        return -1;
    int rc = !always && s_plain(value) ? (fputs(value, f) == EOF ? -1 : 0)
                                       : s_quoted(f, value);
    return rc < 0 || fputc('\n', f) == EOF ? -1 : 0;
}

bool rdzv_env_split(char *line, char **key, char **value)
{
    char *eq = strchr(line, '=');
    if (!eq || eq == line)
        return false;
    *eq = '\0';
    *key = line;
    *value = eq + 1;
    char *out = eq + 1;
    bool quoted = false;
    for (const char *in = eq + 1; *in; in++) {
        if (*in == '\'')
            quoted = !quoted;
        else if (*in == '\\' && !quoted && in[1])
            *out++ = *++in;
        else
            *out++ = *in;
    }
    *out = '\0';
    return true;
}
