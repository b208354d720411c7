/* Runs a shell test script as a child and exits with its status.
 *
 * Why: `meson test --wrap=valgrind` would otherwise put /bin/sh itself
 * under memcheck, and dash leaks by design. valgrind does not follow
 * children by default, so only this small, leak-free parent is checked.
 * Usage: run_script SCRIPT ARGS... */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_EXIT_SETUP 99     /* meson: the test could not run at all */

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: run_script SCRIPT ARGS...\n");
        return S_EXIT_SETUP;
    }
    pid_t pid = fork();
    if (pid < 0)
        return S_EXIT_SETUP;
    if (pid == 0) {
        argv[0] = "sh";
        execv("/bin/sh", argv);
        _exit(S_EXIT_SETUP);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return S_EXIT_SETUP;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : S_EXIT_SETUP;
}
