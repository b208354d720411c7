/* The environment as text: KEY=VALUE lines that a POSIX shell can source
 * (os-release's convention: a value is quoted only when it needs it), and
 * the reading of one such line back. Used for `rdzv join --format
 * env|export`, the agent's PATH.env and the environment of their CMD. */
#ifndef RDZV_ENV_TEXT_H
#define RDZV_ENV_TEXT_H

#include <stdbool.h>
#include <stdio.h>

/* Writes "KEY=VALUE\n". VALUE goes as it is when every character is one no
 * shell treats specially, else in single quotes ('\'' for a quote); always:
 * quote it in any case (`export` lines). -1 on a write error. */
int rdzv_env_put(FILE *f, const char *key, const char *value, bool always);
/* Writes value as one shell word: as it is, or in single quotes when it
 * needs them (or is empty). -1 on a write error. */
int rdzv_env_quote(FILE *f, const char *value);
/* Splits line (one line, no newline) in place at its first '=' and removes
 * the value's shell quoting ('...' and \x, as rdzv_env_put writes it);
 * the value stays right after the key's NUL, where the '=' was.
 * false: no '=', or an empty key. */
bool rdzv_env_split(char *line, char **key, char **value);

#endif
