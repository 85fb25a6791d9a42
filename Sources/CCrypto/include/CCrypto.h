#ifndef BEACONBENCH_CCRYPTO_H
#define BEACONBENCH_CCRYPTO_H
// SHA-256 from OpenSSL's libcrypto (libssl3 as Debian ships it), loaded on
// first use (libcrypto.c): linking it would cost every start of beaconbench
// the loading of a 4.5 MB library that only the ledger and digests need.
#include <stddef.h>
#include <spawn.h>

/// glibc's (2.29 and later), which <spawn.h> declares only under
/// _GNU_SOURCE: the ledger's ExternalProcess runs ssh-keygen in its
/// temporary directory with it (Foundation's Process did the same).
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *__restrict actions,
                                                const char *__restrict path);

/// Loads libcrypto.so.3 if it is not loaded yet: 1 when it is there and
/// has SHA-256, 0 when not (then beaconbench_sha256 fails).
int beaconbench_crypto_load(void);

/// dlerror()'s text (or beaconbench's) of the failed load, or NULL.
const char *beaconbench_crypto_error(void);

/// OpenSSL_version(OPENSSL_VERSION) of the loaded libcrypto ("OpenSSL
/// 3.0.15 3 Sep 2024"), loading it first; NULL when it cannot be loaded.
const char *beaconbench_crypto_version(void);

/// The SHA-256 digest of `count` bytes at `data` into `digest` (32 bytes):
/// 1 on success, 0 when libcrypto could not be loaded or failed.
int beaconbench_sha256(const void *data, size_t count, unsigned char *digest);

/// The same over two pieces, as one message (`prefix` then `data`): the
/// Merkle tree's leaf and node hashes without copying them together.
int beaconbench_sha256_2(const void *prefix, size_t prefix_count, const void *data, size_t count,
                         unsigned char *digest);
#endif
