#ifndef BEACONBENCH_CZLIB_SHIM_H
#define BEACONBENCH_CZLIB_SHIM_H
#include <zlib.h>
#endif
