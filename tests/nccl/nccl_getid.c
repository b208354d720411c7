/* Calls ncclGetUniqueId COUNT times (default 2) and prints each ID as one
 * line of hex, or "error N" for a failed call. Linked against libnccl, so
 * an LD_PRELOAD'ed librdzv_shim.so sees the calls (tests/nccl/nccl_ids.py). */
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>

/* The shim returns these values without including nccl.h. */
_Static_assert(ncclSuccess == 0, "ncclSuccess");
_Static_assert(ncclSystemError == 2, "ncclSystemError");
_Static_assert(ncclInvalidArgument == 4, "ncclInvalidArgument");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId size");

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 2;
    for (int i = 0; i < count; i++) {
        ncclUniqueId id;
        ncclResult_t rc = ncclGetUniqueId(&id);
        if (rc != ncclSuccess) {
            printf("error %d\n", (int) rc);
            continue;
        }
        for (size_t b = 0; b < sizeof id.internal; b++)
            printf("%02x", (unsigned char) id.internal[b]);
        putchar('\n');
    }
    return 0;
}
