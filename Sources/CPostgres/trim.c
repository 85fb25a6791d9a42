#include "CPostgres.h"

#include <malloc.h>

void beaconbench_release_free_memory(void) {
#ifdef __GLIBC__
    (void)malloc_trim(0);
#endif
}
