#include "harness.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 0: serving; -1: rdzvd exited at start (its port was taken). */
static int s_spawn(rdzv_test_server_t *s, const char *bind)
{
    const char *exe = getenv("RDZVD");
    ck_assert_msg(exe != NULL, "RDZVD is not set");
    char endpoint_file[128], cmd[1024];
    snprintf(endpoint_file, sizeof endpoint_file, "%s/endpoint", s->state_dir);
    unlink(endpoint_file);
    snprintf(cmd, sizeof cmd, "exec %s --bind %s --state-dir %s --endpoint-file %s "
             "--port-limit 32000 %s 2>>%s/rdzvd.log",
             exe, bind, s->state_dir, endpoint_file, s->extra, s->state_dir);
    s->pid = fork();
    ck_assert_int_ge(s->pid, 0);
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(endpoint_file, "r");
        if (f) {
            char line[128] = "";
            if (fgets(line, sizeof line, f))
                line[strcspn(line, "\n")] = '\0';
            fclose(f);
            if (*line) {
                snprintf(s->endpoint, sizeof s->endpoint, "%s", line);
                return 0;
            }
        }
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            return -1;
        }
        usleep(10000);
    }
    ck_abort_msg("rdzvd did not come up in 10 s");
    return -1;
}

void rdzv_test_server_start(rdzv_test_server_t *s, const char *extra)
{
    memset(s, 0, sizeof *s);
    srand((unsigned) (getpid() ^ time(NULL)));
    strcpy(s->state_dir, "/tmp/rdzv-it-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(s->state_dir));
    snprintf(s->extra, sizeof s->extra, "%s", extra ? extra : "");
    /* A port below the kernel's ephemeral range and the plans' range: a
     * restart on a kernel-picked port can find it taken by a client's
     * outgoing connection. */
    for (int attempt = 0; attempt < 20; attempt++) {
        char bind[64];
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", 12000 + rand() % 7000);
        if (s_spawn(s, bind) == 0)
            return;
    }
    ck_abort_msg("rdzvd could not bind any port; see %s/rdzvd.log", s->state_dir);
}

void rdzv_test_server_restart(rdzv_test_server_t *s)
{
    char bind[128];
    snprintf(bind, sizeof bind, "%s", s->endpoint);
    ck_assert_msg(s_spawn(s, bind) == 0, "rdzvd did not restart on %s; see %s/rdzvd.log",
                  bind, s->state_dir);
}

int rdzv_test_server_stop(rdzv_test_server_t *s, int sig)
{
    int status = -1;
    if (s->pid > 0) {
        kill(s->pid, sig);
        waitpid(s->pid, &status, 0);
        s->pid = 0;
    }
    return status;
}

void rdzv_test_server_cleanup(rdzv_test_server_t *s)
{
    rdzv_test_server_stop(s, SIGTERM);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->state_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->state_dir);
}
