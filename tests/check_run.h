/* The end of every libcheck main(): run the suite (CK_VERBOSITY and the
 * TAP log from the environment, as meson's tap protocol sets them) and
 * report by exit status. */
#ifndef RDZV_CHECK_RUN_H
#define RDZV_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int rdzv_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
