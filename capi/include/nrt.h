/*
 * nrt.h — the libnrt C API implemented by neuron-vfio's libnrt.so (capi crate).
 *
 * Declarations follow the public libnrt ABI (function names, argument types, enum values
 * and struct layouts) so existing programs build and link unchanged. Written for
 * neuron-vfio; see capi/src/ffi.rs for the behaviour of each call.
 */
#ifndef NEURON_VFIO_NRT_H
#define NEURON_VFIO_NRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* API version of this header. */
#define NRT_MAJOR_VERSION 2
#define NRT_MINOR_VERSION 0

/* ---- status codes ---------------------------------------------------------------- */

typedef enum {
    NRT_SUCCESS = 0,
    NRT_FAILURE = 1,
    NRT_INVALID = 2,
    NRT_INVALID_HANDLE = 3,
    NRT_RESOURCE = 4,
    NRT_TIMEOUT = 5,
    NRT_HW_ERROR = 6,
    NRT_QUEUE_FULL = 7,
    NRT_LOAD_NOT_ENOUGH_NC = 9,
    NRT_UNSUPPORTED_NEFF_VERSION = 10,
    NRT_UNINITIALIZED = 13,
    NRT_CLOSED = 14,
    NRT_EXEC_BAD_INPUT = 1002,
    NRT_EXEC_COMPLETED_WITH_NUM_ERR = 1003,
    NRT_EXEC_COMPLETED_WITH_ERR = 1004,
    NRT_EXEC_NC_BUSY = 1005,
    NRT_COLL_PENDING = 1100,
} NRT_STATUS;

/* ---- opaque handles ---------------------------------------------------------------- */

typedef struct nrt_model nrt_model_t;
typedef struct nrt_tensor nrt_tensor_t;
/* A named collection of tensors (opaque). */
typedef void nrt_tensor_set_t;

/* ---- enums ------------------------------------------------------------------------- */

typedef enum {
    NRT_TENSOR_PLACEMENT_DEVICE,
    NRT_TENSOR_PLACEMENT_HOST,
    NRT_TENSOR_PLACEMENT_VIRTUAL,
} nrt_tensor_placement_t;

typedef enum {
    NRT_FRAMEWORK_TYPE_INVALID = 0,
    NRT_FRAMEWORK_TYPE_NO_FW = 1,
    NRT_FRAMEWORK_TYPE_TENSORFLOW,
    NRT_FRAMEWORK_TYPE_PYTORCH,
    NRT_FRAMEWORK_TYPE_MXNET,
    NRT_FRAMEWORK_TYPE_PRECHECK,
} nrt_framework_type_t;

typedef enum nrt_dtype {
    NRT_DTYPE_UNKNOWN = 0x0,
    NRT_DTYPE_INVALID = 0x0,
    NRT_DTYPE_UINT64 = 0x1,
    NRT_DTYPE_INT8 = 0x2,
    NRT_DTYPE_UINT8 = 0x3,
    NRT_DTYPE_INT16 = 0x4,
    NRT_DTYPE_UINT16 = 0x5,
    NRT_DTYPE_BFLOAT16 = 0x6,
    NRT_DTYPE_FLOAT16 = 0x7,
    NRT_DTYPE_INT32 = 0x8,
    NRT_DTYPE_UINT32 = 0x9,
    NRT_DTYPE_FLOAT32 = 0xA,
    NRT_DTYPE_FP32R = 0xB,
    NRT_DTYPE_INT64 = 0xC,
    NRT_DTYPE_FP8_E3 = 0xD,
    NRT_DTYPE_FP8_E4 = 0xE,
    NRT_DTYPE_FP8_E5 = 0xF,
} nrt_dtype_t;

typedef enum nrt_tensor_usage {
    NRT_TENSOR_USAGE_INPUT = 0,
    NRT_TENSOR_USAGE_OUTPUT,
} nrt_tensor_usage_t;

/* ---- structs ----------------------------------------------------------------------- */

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

#define RT_VERSION_DETAIL_LEN 128
#define GIT_HASH_LEN 64

typedef struct nrt_version {
    uint64_t rt_major;
    uint64_t rt_minor;
    uint64_t rt_patch;
    uint64_t rt_maintenance;
    char rt_detail[RT_VERSION_DETAIL_LEN];
    char git_hash[GIT_HASH_LEN];
} nrt_version_t;

/* ---- lifecycle --------------------------------------------------------------------- */

/* Open the device (NEURON_VFIO_DEVICE=sim[:ARCH[:N]] | BDF; default: the first Neuron
 * device bound to vfio-pci, else the simulator; NEURON_VFIO_BACKEND=auto|container|iommufd|
 * noiommu picks the VFIO interface) and initialise the runtime. Version strings may be NULL. */
NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version, const char *fal_version);

/* Unload all models and release the devices. Later calls return NRT_CLOSED. */
void nrt_close(void);

/* Library version; writes at most `size` bytes of *ver. */
NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size);

/* NeuronCores of the device (total / after NEURON_RT_VISIBLE_CORES). Callable before
 * nrt_init. */
NRT_STATUS nrt_get_total_nc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_total_vnc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_visible_nc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_visible_vnc_count(uint32_t *vnc_count);

/* ---- models ------------------------------------------------------------------------ */

/* Load a NEFF on `vnc` (-1: the first free cores). `vnc_count` is deprecated: pass -1. */
NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count, nrt_model_t **model);

/* As nrt_load; only a single-device context (ctx_device_id 0 of ctx_device_count 1) is
 * supported, the NEFF's collectives run between the cores it is loaded on. */
NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
                                uint32_t ctx_device_id, uint32_t ctx_device_count, nrt_model_t **model);

/* Unload a model; the handle becomes invalid. */
NRT_STATUS nrt_unload(nrt_model_t *model);

/* Cores used by a model. */
NRT_STATUS nrt_get_model_nc_count(const nrt_model_t *model, uint32_t *vnc_count);
NRT_STATUS nrt_get_model_vnc_count(const nrt_model_t *model, uint32_t *vnc_count);

/* Inputs then outputs of a model; release with nrt_free_model_tensor_info. */
NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model, nrt_tensor_info_array_t **tensor_info);
NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info);

/* ---- execution --------------------------------------------------------------------- */

NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set);
NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set,
                              int repeat_count);

/* ---- tensors ----------------------------------------------------------------------- */

/* Allocate `size` bytes on `vnc` (-1 allowed for host placement). `name` may be NULL. */
NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc, size_t size, const char *name,
                               nrt_tensor_t **tensor);
/* Free a tensor and set *tensor to NULL. */
void nrt_tensor_free(nrt_tensor_t **tensor);
NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size);
NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size);
/* Size in bytes (0 for an invalid tensor). */
size_t nrt_tensor_get_size(const nrt_tensor_t *tensor);

/* ---- tensor sets ------------------------------------------------------------------- */

NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t **result);
/* Free a set (not its tensors) and set *tensor_set to NULL. */
void nrt_destroy_tensor_set(nrt_tensor_set_t **tensor_set);
/* Bind (or rebind) `tensor` under `tensor_name`. */
NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name, nrt_tensor_t *tensor);
NRT_STATUS nrt_get_tensor_from_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name,
                                          nrt_tensor_t **tensor);

#ifdef __cplusplus
}
#endif

#endif /* NEURON_VFIO_NRT_H */
