/*
 * nrt/nrt.h — the libnrt C API implemented by neuron-vfio's libnrt.so (capi crate).
 *
 * Function names, argument types, enum values and struct layouts follow the public libnrt
 * ABI (aws-neuron-sdk, src/libnrt/include/nrt/), so existing programs build and link
 * unchanged. The comments here are neuron-vfio's; docs/capi.md lists every call, what it
 * does on this runtime and which status it returns where a call cannot apply.
 *
 * Device selection: NEURON_VFIO_DEVICE=sim[:ARCH[:N]] | <PCI BDF> (default: the first Neuron
 * device bound to vfio-pci, else the simulator); NEURON_VFIO_BACKEND=auto|container|iommufd|
 * noiommu picks the VFIO interface. On the simulator, NEURON_VFIO_SIM_FAULT=KIND@ncN[,...]
 * arms faults when nrt_init has opened the device (the CLI's --sim-fault syntax, N a logical
 * NC; e.g. net-proxy@nc0 in one rank process of a global communicator: docs/fabric.md).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt_status.h"
#include "ndl/neuron_driver_shared_tensor_batch_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* API version of this header. */
#define NRT_MAJOR_VERSION 2
#define NRT_MINOR_VERSION 0

/* ---- opaque handles ---------------------------------------------------------------- */

typedef struct nrt_model nrt_model_t;
typedef struct nrt_tensor nrt_tensor_t;
typedef struct nrt_cc_context nrt_cc_context_t;

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

/* Instance families (nrt_instance_info_t.family). */
enum {
    NRT_INSTANCE_UNKNOWN = 0,
    NRT_INSTANCE_INF1 = 1,
    NRT_INSTANCE_TRN1 = 2,
    NRT_INSTANCE_TRN1N = 3,
    NRT_INSTANCE_INF2 = 4,
    NRT_INSTANCE_TRN2 = 5,
    NRT_INSTANCE_TRN2N = 6,
    NRT_INSTANCE_INF2E = 7,
    NRT_INSTANCE_TRN2P = 8,
    NRT_INSTANCE_TRN2U = 9,
    NRT_INSTANCE_TRN2E = 10,
    NRT_INSTANCE_TRN2EU = 11,
    NRT_INSTANCE_TRN2AC = 12,
    NRT_INSTANCE_TRN2UAC = 13,
    NRT_INSTANCE_TRN3 = 14,
    NRT_INSTANCE_TRN3PDS98 = 15
};

/* Instance sizes (nrt_instance_info_t.size). */
enum {
    NRT_INSTANCE_SIZE_1XL,
    NRT_INSTANCE_SIZE_2XL,
    NRT_INSTANCE_SIZE_4XL,
    NRT_INSTANCE_SIZE_6XL,
    NRT_INSTANCE_SIZE_8XL,
    NRT_INSTANCE_SIZE_24XL,
    NRT_INSTANCE_SIZE_32XL,
    NRT_INSTANCE_SIZE_48XL,
    NRT_INSTANCE_SIZE_3XL,
    NRT_INSTANCE_SIZE_UNKNOWN,
    NRT_INSTANCE_SIZE_NUM = NRT_INSTANCE_SIZE_UNKNOWN,
};

typedef enum nrt_op_type {
    NRT_OP_ADD = 0x0,
    NRT_OP_FMA = 0x1,
    NRT_OP_MAX = 0x2,
    NRT_OP_MIN = 0x3,
    NRT_OP_INVALID = 0xF,
} nrt_op_type_t;

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

typedef enum nrt_cc_op_type {
    NRT_CC_ALLGATHER,
    NRT_CC_ALLREDUCE,
    NRT_CC_REDUCESCATTER
} nrt_cc_op_type_t;

/* ---- instance ---------------------------------------------------------------------- */

typedef struct nrt_instance_info {
    uint32_t family;         /* NRT_INSTANCE_* */
    uint32_t size;           /* NRT_INSTANCE_SIZE_* */
    char arch_name[16];      /* NUL-terminated, e.g. "trn1" */
    char device_revision[8]; /* NUL-terminated */
} nrt_instance_info_t;

/* Describe the instance; writes at most `instance_info_len` bytes of *info. */
NRT_STATUS nrt_get_instance_info(nrt_instance_info_t *info, size_t instance_info_len);

/* ---- lifecycle --------------------------------------------------------------------- */

/* Open the device and initialise the runtime. The version strings may be NULL. */
NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version, const char *fal_version);

/* Unload every model and release the devices; later calls return NRT_CLOSED. */
void nrt_close(void);

/* ---- models ------------------------------------------------------------------------ */

/* Load a NEFF on `vnc` (-1: the first free cores). `vnc_count` is deprecated: pass -1. */
NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count, nrt_model_t **model);

/* nrt_load for a NEFF with collectives; this runtime supports a single-device context
 * (ctx_device_id 0 of ctx_device_count 1). */
NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
                                uint32_t ctx_device_id, uint32_t ctx_device_count, nrt_model_t **model);

/* Unload a model; the handle becomes invalid. */
NRT_STATUS nrt_unload(nrt_model_t *model);

/* Cores used by a model (the _nc_ spelling is the deprecated one). */
NRT_STATUS nrt_get_model_nc_count(const nrt_model_t *model, uint32_t *vnc_count);
NRT_STATUS nrt_get_model_vnc_count(const nrt_model_t *model, uint32_t *vnc_count);

/* Cores of the instance / visible after NEURON_RT_VISIBLE_CORES; callable before nrt_init. */
NRT_STATUS nrt_get_total_nc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_total_vnc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_visible_nc_count(uint32_t *vnc_count);
NRT_STATUS nrt_get_visible_vnc_count(uint32_t *vnc_count);

/* ---- tensor sets ------------------------------------------------------------------- */

/* A set of named tensors (opaque). */
typedef void nrt_tensor_set_t;

NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t **result);
/* Free a set (not its tensors) and set *tensor_set to NULL. */
void nrt_destroy_tensor_set(nrt_tensor_set_t **tensor_set);
/* Bind (or rebind) `tensor` under `tensor_name`. */
NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name, nrt_tensor_t *tensor);
/* The tensor bound to `tensor_name` (NRT_FAILURE if there is none). */
NRT_STATUS nrt_get_tensor_from_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name,
                                          nrt_tensor_t **tensor);

/* ---- execution --------------------------------------------------------------------- */

NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set);
NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set,
                              int repeat_count);

/* Set up the process-wide collectives communicator (single device on this runtime). */
NRT_STATUS nrt_build_global_comm(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

/* ---- tensors ----------------------------------------------------------------------- */

/* Allocate `size` bytes on `vnc` (-1 allowed for host placement). `name` may be NULL. */
NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc, size_t size, const char *name,
                               nrt_tensor_t **tensor);
/* Free a tensor and set *tensor to NULL. */
void nrt_tensor_free(nrt_tensor_t **tensor);
NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size);
NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size);

/* Operations on one tensor of a batch. */
typedef struct nrt_tensor_batch {
    const nrt_tensor_t *tensor;
    const nrt_tensor_batch_op_t *ops;
    uint32_t num_ops;
} nrt_tensor_batch_t;

/* Run every op of every batch (reads into / writes from op->buffer); stops at the first
 * failure. `unsafe` is accepted (there is no tensor tracking to skip). */
NRT_STATUS nrt_tensor_read_batch(const nrt_tensor_batch_t *batches, uint64_t num_batches, bool unsafe);
NRT_STATUS nrt_tensor_write_batch(const nrt_tensor_batch_t *batches, uint64_t num_batches, bool unsafe);

/* Copy `size` bytes between tensors (device tensors: same NeuronCore, else NRT_INVALID). */
NRT_STATUS nrt_tensor_copy(const nrt_tensor_t *src, size_t src_offset, nrt_tensor_t *dst, size_t dst_offset,
                           size_t size);

/* Size in bytes (0 for an invalid tensor). */
size_t nrt_tensor_get_size(const nrt_tensor_t *tensor);

/* Fill `size` bytes at `offset` with (unsigned char)value. */
NRT_STATUS nrt_tensor_memset(nrt_tensor_t *tensor, uint64_t offset, int value, size_t size);

/* A tensor without storage (size 0) until nrt_tensor_attach_buffer. */
NRT_STATUS nrt_tensor_allocate_empty(const char *name, nrt_tensor_t **tensor);

/* Use caller memory (valid for the tensor's lifetime) as the tensor's storage; storage the
 * tensor owned before is released. */
NRT_STATUS nrt_tensor_attach_buffer(nrt_tensor_t *tensor, void *buffer, size_t size);

/* A tensor viewing `size` bytes at `offset` of `tensor_source` (no copy). */
NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t *tensor_source, size_t offset, size_t size, const char *name,
                                     nrt_tensor_t **tensor_slice);

/* Host virtual address of the tensor's bytes; NULL where none exists (device memory that is
 * not mapped into the process). */
void *nrt_tensor_get_va(const nrt_tensor_t *tensor);

typedef struct nrt_tensor_device_allocation_info {
    uint64_t physical_address; /* device address of byte 0 */
    size_t size;               /* allocation size (>= tensor size) */
    int hbm_index;             /* HBM holding the tensor */
} nrt_tensor_device_allocation_info_t;

/* Device placement of a device tensor (NRT_INVALID for host tensors). */
NRT_STATUS nrt_tensor_get_device_allocation_info(const nrt_tensor_t *tensor,
                                                 nrt_tensor_device_allocation_info_t *alloc_info);

/* Wait until executions have written `output_tensor` at least `expected_completion_count`
 * times since the last reset: NRT_SUCCESS, or NRT_TIMEOUT after `timeout` microseconds
 * (negative: no limit). */
NRT_STATUS nrt_tensor_check_output_completion(const nrt_tensor_t *output_tensor, int64_t timeout,
                                              uint64_t expected_completion_count);

/* Reset the tensor's completion count to 0. */
NRT_STATUS nrt_tensor_reset_output_completion(nrt_tensor_t *output_tensor);

/* A dma-buf file descriptor for `size` bytes of device memory at `va` (close it when done). */
NRT_STATUS nrt_get_dmabuf_fd(uint64_t va, uint64_t size, int *fd);

/* Host device id of device `neuron_dev` (this runtime does not remap ids). */
NRT_STATUS nrt_host_device_id_get(int neuron_dev, uint32_t *host_device_id);

/* Routing ids indexed by host device id; *count: in, table entries; out, entries written. */
NRT_STATUS nrt_host_device_id_rid_map_get(uint32_t *count, uint32_t *host_did_to_rid_map);

/* Process mapping of HBM `hbm_idx` of device `device_id`. */
NRT_STATUS nrt_get_hbm_mmap_va(int device_id, int hbm_idx, void **addr, size_t *size);

typedef struct nrt_vnc_memory_stats {
    size_t bytes_used;
    size_t bytes_limit;
} nrt_vnc_memory_stats_t;

/* Device memory used by / available to `vnc`; writes at most `stats_size_in` bytes and
 * reports the bytes written in *stats_size_out. */
NRT_STATUS nrt_get_vnc_memory_stats(uint32_t vnc, nrt_vnc_memory_stats_t *stats, size_t stats_size_in,
                                    size_t *stats_size_out);

/* PCI BDF of the EFA device attached to the Neuron device holding `va`. */
NRT_STATUS nrt_get_attached_efa_bdf(const void *va, char *efa_bdf, size_t *len);

/* ---- collectives outside a NEFF ------------------------------------------------------- */

typedef struct nrt_cc_comm {
    uint32_t *replica_group;
    uint32_t rank;
    uint32_t rank_n;
    uint32_t ctx_device_id;
    uint32_t ctx_device_count;
    uint32_t vnc;
} nrt_cc_comm_t;

typedef struct nrt_tensor_list {
    nrt_tensor_t **tensors;
    size_t num_tensors;
} nrt_tensor_list_t;

NRT_STATUS nrt_cc_global_comm_init(uint32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

#ifdef __cplusplus
}
#endif
