// The C libraries linked into the beaconbench executable statically
// (Package.swift, CStatic): the stand-ins for libsystemd's two functions
// that libdbus-1.a refers to (sd_stubs.c).
#ifndef BEACONBENCH_CSTATIC_H
#define BEACONBENCH_CSTATIC_H

int sd_listen_fds(int unset_environment);
int sd_is_socket(int fd, int family, int type, int listening);

#endif
