#ifndef BEACONBENCH_CSQLITE_SHIM_H
#define BEACONBENCH_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift
/// cannot import: bind calls take this instead so SQLite copies the bytes.
static inline sqlite3_destructor_type beaconbench_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
#endif
