/* The files the agent keeps beside its socket: PATH.env (the assignment, for
 * engines that source it) and PATH.session (the session a next agent
 * resumes). */
#ifndef RDZV_AGENT_FILES_H
#define RDZV_AGENT_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    const char *path;          /* PATH.env */
    const char *text;          /* the assignment's KEY=VALUE lines */
    int range_base;            /* written as RDZV_PORT_RANGE */
    int range_limit;
    const uid_t *allow_uids;   /* --allow-uid: who else may read it */
    size_t n_allow_uids;
} rdzv_agent_env_file_t;

/* Writes spec->path atomically (a temporary file, then rename), readable by
 * the agent and the allowed uids only. 0, or -1 having said why. */
int rdzv_agent_env_file_write(const rdzv_agent_env_file_t *spec);

/* Writes session (hex) to path, mode 0600; a failure only costs the next
 * agent a new epoch. */
void rdzv_agent_session_save(const char *path, const char *session);
/* Reads a session of size - 1 hex digits from path into session; whether
 * there was one. */
bool rdzv_agent_session_load(const char *path, char *session, size_t size);

/* socket_path followed by suffix, malloc'd; NULL without memory. */
char *rdzv_agent_beside_socket(const char *socket_path, const char *suffix);
/* Whether --socket's directory exists and the agent may write there: 0, or
 * -1 having said why. */
int rdzv_agent_check_socket_dir(const char *socket_path);

#endif
