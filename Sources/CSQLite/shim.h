#ifndef BEACONBENCH_CSQLITE_SHIM_H
#define BEACONBENCH_CSQLITE_SHIM_H
// Debian's libsqlite3 is built with SQLITE_ENABLE_PREUPDATE_HOOK (`PRAGMA
// compile_options`); the header declares the hook only when told so. The
// ledger (Sources/Inventory/Ledger) records every row change through it.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift
/// cannot import: bind calls take this instead so SQLite copies the bytes.
static inline sqlite3_destructor_type beaconbench_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
#endif
