#ifndef BEACONBENCH_CDBUS_SHIM_H
#define BEACONBENCH_CDBUS_SHIM_H
// libdbus-1 as Swift sees it. The type-code and message-type macros are
// defined once in Swift (DBusBinding/LibDBus.swift); nothing here needs a
// variadic function, so the header is included as it is.
#include <dbus/dbus.h>
#endif
