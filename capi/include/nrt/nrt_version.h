/*
 * nrt/nrt_version.h — library version query (public libnrt ABI).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_VERSION_DETAIL_LEN 128
#define GIT_HASH_LEN 64

typedef struct nrt_version {
    uint64_t rt_major;
    uint64_t rt_minor;
    uint64_t rt_patch;
    uint64_t rt_maintenance;
    char rt_detail[RT_VERSION_DETAIL_LEN]; /* NUL-terminated */
    char git_hash[GIT_HASH_LEN];           /* NUL-terminated */
} nrt_version_t;

/* Fill at most `size` bytes of *ver (callable before nrt_init). */
NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size);

#ifdef __cplusplus
}
#endif
