/*
 * nrt/nrt_experimental.h — libnrt's experimental API (public libnrt ABI; see nrt/nrt.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nrt_tensor_usage {
    NRT_TENSOR_USAGE_INPUT = 0,
    NRT_TENSOR_USAGE_OUTPUT,
} nrt_tensor_usage_t;

#define NRT_TENSOR_NAME_MAX 256

typedef struct nrt_tensor_info {
    char name[NRT_TENSOR_NAME_MAX]; /* NUL-terminated */
    nrt_tensor_usage_t usage;
    size_t size;                    /* bytes */
    nrt_dtype_t dtype;
    uint32_t *shape;                /* ndim entries */
    uint32_t ndim;
} nrt_tensor_info_t;

typedef struct nrt_tensor_info_array {
    uint64_t tensor_count;
    nrt_tensor_info_t tensor_array[];
} nrt_tensor_info_array_t;

/* Called once per asynchronous execution when it completes. */
typedef void (*NRT_ASYNC_EXEC_STATUS_CALLBACK)(void *params, uint32_t model_id, uint32_t vnc, uint64_t job_id,
                                               NRT_STATUS status);

/* Inputs then outputs of a model; release with nrt_free_model_tensor_info. */
NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model, nrt_tensor_info_array_t **tensor_info);

/* Concurrent callers that can usefully execute the model (deprecated). */
NRT_STATUS nrt_get_model_instance_count(nrt_model_t *model, uint32_t *instance_count);

NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info);

/* Trace every visible core until nrt_trace_stop, which writes the trace to `filename`
 * (Chrome/Perfetto JSON, docs/profiling.md). */
NRT_STATUS nrt_trace_start(bool trace_mem);
NRT_STATUS nrt_trace_stop(const char *filename);

/* The NCCL network plugin libnrt loads (none on this runtime: NULL, *err set). */
void *nrt_get_libnccl_net(int *err, char *err_msg, size_t err_msg_size);

typedef struct nrt_ucode_img {
    uint8_t *bin;
    size_t size;
} nrt_ucode_img;

typedef struct nrt_ucode_info {
    nrt_ucode_img iram;
    nrt_ucode_img dram;
} nrt_ucode_info;

/* Pooling-engine microcode to load at nrt_init (must precede nrt_init). */
NRT_STATUS nrt_set_pool_eng_ucode(const nrt_ucode_info *ucode_info);

/* Copy into memory returned by nrt_tensor_get_va / nrt_get_hbm_mmap_va. */
NRT_STATUS nrt_memcpy_to_device(void *dest, const void *src, size_t size);

/* The callback for asynchronous executions (replaces an earlier one; NULL removes it). */
NRT_STATUS nrt_register_async_exec_callback(NRT_ASYNC_EXEC_STATUS_CALLBACK callback, void *params);

/* A barrier across `g_device_count` workers (one worker on this runtime). */
NRT_STATUS nrt_barrier(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

/* Gather `rank_input_size` bytes from every worker into `output`. */
NRT_STATUS nrt_all_gather(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count, uint32_t rank_input_size,
                          void *input, void *output);

/* Block until every queued asynchronous execution of `vnc` has completed. */
NRT_STATUS nrt_async_drain_queued_execs(int32_t vnc);

typedef struct nrt_model_info {
    uint32_t vnc; /* first core of the model */
} nrt_model_info_t;

/* Fill at most `info_size_in` bytes of *info; *info_size_out gets the bytes written. */
NRT_STATUS nrt_get_model_info(const nrt_model_t *model, nrt_model_info_t *info, size_t info_size_in,
                              size_t *info_size_out);

#ifdef __cplusplus
}
#endif
