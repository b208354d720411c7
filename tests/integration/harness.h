/* Runs a real rdzvd on a loopback port for integration tests. The binary
 * comes from $RDZVD (set by meson). */
#ifndef RDZV_TEST_HARNESS_H
#define RDZV_TEST_HARNESS_H

#include <sys/types.h>

typedef struct {
    pid_t pid;
    char state_dir[64];
    char endpoint[128];          /* tcp://127.0.0.1:PORT */
    char extra[256];
} rdzv_test_server_t;

/* Starts rdzvd on an ephemeral loopback port with a fresh state dir; extra
 * holds additional options separated by spaces (may be NULL). Fails the
 * test if rdzvd does not come up within 10 s. */
void rdzv_test_server_start(rdzv_test_server_t *s, const char *extra);
/* Starts it again on the same endpoint and state dir. */
void rdzv_test_server_restart(rdzv_test_server_t *s);
/* Sends sig (SIGTERM or SIGKILL) and reaps it; returns its exit status. */
int rdzv_test_server_stop(rdzv_test_server_t *s, int sig);
/* Stops it and removes the state dir. */
void rdzv_test_server_cleanup(rdzv_test_server_t *s);

#endif
