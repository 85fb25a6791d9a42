// libpq, loaded when first needed instead of at start-up.
//
// Linking libpq brings about thirty libraries (Kerberos, LDAP, GnuTLS,
// OpenSSL…) whose loading and constructors cost every start of beaconbench
// about 5 ms, though only `sync` and `--inventory postgresql://…` use it.
// The functions beaconbench calls are defined here under libpq's own names
// and forward to libpq, opened with dlopen on the first call.
#include "CPostgres.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#define LIBPQ_FUNCTIONS(X)                                                                                       \
    X(PGconn *, PQconnectdbParams, (const char *const *keywords, const char *const *values, int expand_dbname),  \
      (keywords, values, expand_dbname), NULL)                                                                   \
    X(ConnStatusType, PQstatus, (const PGconn *conn), (conn), CONNECTION_BAD)                                    \
    X(char *, PQerrorMessage, (const PGconn *conn), (conn), NULL)                                                \
    X(int, PQconnectionNeedsPassword, (const PGconn *conn), (conn), 0)                                          \
    X(PQconninfoOption *, PQconninfoParse, (const char *conninfo, char **errmsg), (conninfo, errmsg), NULL)      \
    X(PGresult *, PQexec, (PGconn *conn, const char *query), (conn, query), NULL)                                \
    X(PGresult *, PQexecParams,                                                                                  \
      (PGconn *conn, const char *command, int nParams, const Oid *paramTypes, const char *const *paramValues,   \
       const int *paramLengths, const int *paramFormats, int resultFormat),                                      \
      (conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats, resultFormat), NULL)          \
    X(ExecStatusType, PQresultStatus, (const PGresult *res), (res), PGRES_FATAL_ERROR)                          \
    X(char *, PQresultErrorMessage, (const PGresult *res), (res), NULL)                                          \
    X(char *, PQresultErrorField, (const PGresult *res, int fieldcode), (res, fieldcode), NULL)                   \
    X(int, PQsocket, (const PGconn *conn), (conn), -1)                                                           \
    X(int, PQntuples, (const PGresult *res), (res), 0)                                                           \
    X(int, PQnfields, (const PGresult *res), (res), 0)                                                           \
    X(char *, PQfname, (const PGresult *res, int field_num), (res, field_num), NULL)                             \
    X(Oid, PQftype, (const PGresult *res, int field_num), (res, field_num), 0)                                   \
    X(char *, PQgetvalue, (const PGresult *res, int tup_num, int field_num), (res, tup_num, field_num), NULL)    \
    X(int, PQgetlength, (const PGresult *res, int tup_num, int field_num), (res, tup_num, field_num), 0)          \
    X(int, PQgetisnull, (const PGresult *res, int tup_num, int field_num), (res, tup_num, field_num), 1)        \
    X(PGcancel *, PQgetCancel, (PGconn *conn), (conn), NULL)                                                     \
    X(int, PQcancel, (PGcancel *cancel, char *errbuf, int errbufsize), (cancel, errbuf, errbufsize), 0)         \
    X(char *, PQencryptPasswordConn, (PGconn *conn, const char *passwd, const char *user, const char *algorithm), \
      (conn, passwd, user, algorithm), NULL)                                                                     \
    X(int, PQsslInUse, (PGconn *conn), (conn), 0)                                                               \
    X(int, PQlibVersion, (void), (), 0)

#define LIBPQ_VOID_FUNCTIONS(X)                                                 \
    X(PQfinish, (PGconn *conn), (conn))                                         \
    X(PQconninfoFree, (PQconninfoOption *connOptions), (connOptions))           \
    X(PQclear, (PGresult *res), (res))                                          \
    X(PQfreeCancel, (PGcancel *cancel), (cancel))                               \
    X(PQfreemem, (void *ptr), (ptr))

static struct {
#define FIELD(ret, name, params, args, fallback) ret(*name) params;
#define VOID_FIELD(name, params, args) void(*name) params;
    LIBPQ_FUNCTIONS(FIELD)
    LIBPQ_VOID_FUNCTIONS(VOID_FIELD)
} libpq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static const char *failure;

static void load(void) {
    void *handle = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        failure = dlerror();
        return;
    }
    int complete = 1;
#define RESOLVE(ret, name, params, args, fallback) \
    libpq.name = (ret(*) params)dlsym(handle, #name); \
    complete &= libpq.name != NULL;
#define VOID_RESOLVE(name, params, args) \
    libpq.name = (void(*) params)dlsym(handle, #name); \
    complete &= libpq.name != NULL;
    LIBPQ_FUNCTIONS(RESOLVE)
    LIBPQ_VOID_FUNCTIONS(VOID_RESOLVE)
    if (!complete) {
        failure = "libpq.so.5 lacks a function beaconbench needs";
        return;
    }
    loaded = 1;
}

int beaconbench_libpq_load(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *beaconbench_libpq_error(void) {
    pthread_once(&once, load);
    return failure;
}

#define FORWARD(ret, name, params, args, fallback) \
    ret name params {                             \
        if (!beaconbench_libpq_load()) return fallback; \
        return libpq.name args;                   \
    }
#define VOID_FORWARD(name, params, args)          \
    void name params {                            \
        if (!beaconbench_libpq_load()) return;    \
        libpq.name args;                          \
    }
LIBPQ_FUNCTIONS(FORWARD)
LIBPQ_VOID_FUNCTIONS(VOID_FORWARD)
