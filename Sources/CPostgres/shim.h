#ifndef BEACONBENCH_CPOSTGRES_SHIM_H
#define BEACONBENCH_CPOSTGRES_SHIM_H
#include <libpq-fe.h>
#endif
