// SHA-256 from OpenSSL's libcrypto, loaded when first needed instead of at
// start-up (as libpq is: Sources/CPostgres/libpq.c). The algorithm is
// fetched once (EVP_MD_fetch) and reused: EVP_sha256() would make every
// digest look it up again.
#include "CCrypto.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

typedef struct evp_md_st EVP_MD;
typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef struct ossl_lib_ctx_st OSSL_LIB_CTX;
typedef struct engine_st ENGINE;

static struct {
    EVP_MD *(*EVP_MD_fetch)(OSSL_LIB_CTX *ctx, const char *algorithm, const char *properties);
    int (*EVP_Digest)(const void *data, size_t count, unsigned char *md, unsigned int *size, const EVP_MD *type,
                      ENGINE *impl);
    EVP_MD_CTX *(*EVP_MD_CTX_new)(void);
    void (*EVP_MD_CTX_free)(EVP_MD_CTX *ctx);
    int (*EVP_DigestInit_ex)(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl);
    int (*EVP_DigestUpdate)(EVP_MD_CTX *ctx, const void *d, size_t cnt);
    int (*EVP_DigestFinal_ex)(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s);
    const char *(*OpenSSL_version)(int type);
} crypto;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static const char *failure;
static EVP_MD *sha256;

static void load(void) {
    void *handle = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        failure = dlerror();
        return;
    }
    int complete = 1;
#define RESOLVE(name)                                         \
    *(void **)(&crypto.name) = dlsym(handle, #name);          \
    complete &= crypto.name != NULL;
    RESOLVE(EVP_MD_fetch)
    RESOLVE(EVP_Digest)
    RESOLVE(EVP_MD_CTX_new)
    RESOLVE(EVP_MD_CTX_free)
    RESOLVE(EVP_DigestInit_ex)
    RESOLVE(EVP_DigestUpdate)
    RESOLVE(EVP_DigestFinal_ex)
    RESOLVE(OpenSSL_version)
    if (!complete) {
        failure = "libcrypto.so.3 lacks a function beaconbench needs";
        return;
    }
    sha256 = crypto.EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256 == NULL) {
        failure = "libcrypto.so.3 has no SHA256";
        return;
    }
    loaded = 1;
}

int beaconbench_crypto_load(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *beaconbench_crypto_error(void) {
    pthread_once(&once, load);
    return failure;
}

const char *beaconbench_crypto_version(void) {
    if (!beaconbench_crypto_load()) return NULL;
    return crypto.OpenSSL_version(0); // OPENSSL_VERSION: "OpenSSL 3.0.15 3 Sep 2024"
}

int beaconbench_sha256(const void *data, size_t count, unsigned char *digest) {
    if (!beaconbench_crypto_load()) return 0;
    unsigned int size = 0;
    return crypto.EVP_Digest(data, count, digest, &size, sha256, NULL) == 1 && size == 32;
}

int beaconbench_sha256_2(const void *prefix, size_t prefix_count, const void *data, size_t count,
                         unsigned char *digest) {
    if (!beaconbench_crypto_load()) return 0;
    // One context per thread, reused: allocating one per digest costs more
    // than hashing a leaf.
    static __thread EVP_MD_CTX *context;
    if (context == NULL && (context = crypto.EVP_MD_CTX_new()) == NULL) return 0;
    unsigned int size = 0;
    return crypto.EVP_DigestInit_ex(context, sha256, NULL) == 1
        && crypto.EVP_DigestUpdate(context, prefix, prefix_count) == 1
        && crypto.EVP_DigestUpdate(context, data, count) == 1
        && crypto.EVP_DigestFinal_ex(context, digest, &size) == 1 && size == 32;
}
