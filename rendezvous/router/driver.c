/* What every driver shares (driver.h). */
#include "driver.h"

#include <stdarg.h>
#include <stdio.h>

int rdzv_router_fail(rdzv_router_sync_t *s, rdzv_router_err_t why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    s->why = why;
    return -1;
}
