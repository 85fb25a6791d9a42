// libdbus-1.a (Debian's) refers to two functions of libsystemd, for
// systemd's socket activation of a D-Bus *server*; beaconbench only ever
// connects as a client, so they are never called. These stand in for them
// so that the static libdbus links without libsystemd (and the seven
// libraries it brings: libcap, libgcrypt, liblzma, libzstd, liblz4…):
// "no descriptors passed", and "not a socket of that kind".
#include <errno.h>
#include "cstatic.h"

int sd_listen_fds(int unset_environment) {
    (void)unset_environment;
    return 0;
}

int sd_is_socket(int fd, int family, int type, int listening) {
    (void)fd;
    (void)family;
    (void)type;
    (void)listening;
    return -ENOSYS;
}
