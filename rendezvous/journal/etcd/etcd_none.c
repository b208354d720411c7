/* rdzvd built without libcurl: there is no etcd journal, and opening one
 * says so. */
#include "journal_backend.h"
#include "journal_opts.h"

#include <stdio.h>

void *rdzv_journal_remote_open(const rdzv_journal_remote_t *remote,
                               const rdzv_journal_backend_t **ops, char *err, size_t errlen)
{
    (void) remote;
    *ops = NULL;
    snprintf(err, errlen, "this rdzvd was built without etcd support (meson -Detcd=enabled "
             "needs libcurl4-openssl-dev)");
    return NULL;
}
