#ifndef BEACONBENCH_CPOSTGRES_H
#define BEACONBENCH_CPOSTGRES_H
// libpq's declarations; its functions are loaded on first use (libpq.c).
#include <libpq-fe.h>

/// Loads libpq (libpq.so.5) if it is not loaded yet: 1 when it is there,
/// 0 when it could not be loaded (then every PQ function below fails safely:
/// NULL, CONNECTION_BAD, PGRES_FATAL_ERROR, 0).
int beaconbench_libpq_load(void);

/// dlerror()'s text of the failed load, or NULL.
const char *beaconbench_libpq_error(void);

/// Gives the heap's free pages back to the system (glibc's malloc_trim):
/// for a sync about to try again after its connection broke, so that the
/// failed attempt's freed memory does not stay resident (trim.c).
void beaconbench_release_free_memory(void);
#endif
