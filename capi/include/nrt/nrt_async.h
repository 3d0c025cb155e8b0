/*
 * nrt/nrt_async.h — asynchronous requests on execution units (public libnrt ABI).
 *
 * Each Logical NeuronCore has execution units (XUs) per kind and queue; a request is queued
 * on one and gets a sequence id (XU id in the top 16 bits, a per-XU counter in the low 48).
 * Requests of one XU run and complete in order.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NRTA_XU_TENSOR_READ = 0,
    NRTA_XU_TENSOR_WRITE,
    NRTA_XU_TENSOR_OP,
    NRTA_XU_COMPUTE,
    NRTA_XU_COLLECTIVES,
    NRTA_XU_TYPE_NUM
} nrta_xu_t;

typedef uint64_t nrta_seq_t;
typedef uint16_t nrta_xu_id_t;

#define NRTA_SEQ_NUM_MAX ((1ull << 48) - 1)
#define NRTA_SEQ_NUM_MASK NRTA_SEQ_NUM_MAX
#define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id) & NRTA_SEQ_NUM_MASK)
#define NRTA_SEQ_GET_XU_ID(seq_id) ((seq_id) >> 48)

typedef struct nrta_error {
    nrta_seq_t seq_id;
    uint64_t error_code; /* an NRT_STATUS */
} nrta_error_t;

#ifdef __cplusplus
static_assert(sizeof(nrta_error_t) == 16, "nrta_error_t is 16 bytes");
#else
_Static_assert(sizeof(nrta_error_t) == 16, "nrta_error_t is 16 bytes");
#endif

/* Collects the failed requests of the XUs it is passed to (opaque). */
typedef struct nrta_error_tracker nrta_error_tracker_t;

/* Queue a copy of `size` bytes from `buf` into `tensor` at `offset` (TENSOR_WRITE XU). */
NRT_STATUS nrta_tensor_write(nrt_tensor_t *tensor, const void *buf, uint64_t offset, uint64_t size, int queue,
                             nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/* Queue a copy of `size` bytes of `tensor` at `offset` into `buf` (TENSOR_READ XU). */
NRT_STATUS nrta_tensor_read(void *buf, nrt_tensor_t *tensor, uint64_t offset, uint64_t size, int queue,
                            nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/* Queue a tensor-to-tensor copy (TENSOR_OP XU). */
NRT_STATUS nrta_tensor_copy(nrt_tensor_t *src, uint64_t src_offset, nrt_tensor_t *dst, uint64_t dst_offset,
                            uint64_t size, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/* Queue an execution of `model` (COMPUTE XU of its first core; queue must be 0). */
NRT_STATUS nrta_execute_schedule(nrt_model_t *model, const nrt_tensor_set_t *input, nrt_tensor_set_t *output,
                                 int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/* Prepare / queue a collective operation outside a NEFF (COLLECTIVES XU). */
NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t *comm, nrt_tensor_list_t *input, nrt_tensor_list_t *output,
                           nrt_dtype_t dtype, nrt_op_type_t op, nrt_cc_op_type_t cc_op, nrt_cc_context_t **cc_ctx);
NRT_STATUS nrta_cc_schedule(nrt_cc_context_t **cc_ctx, int queue, nrta_error_tracker_t *err,
                            nrta_seq_t *req_sequence);

/* Whether request `seq` has completed (NRT_INVALID for a sequence id never issued). */
NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed);

/* The last completed sequence id of an XU (0 if none yet). */
NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t *seq);

/* A file descriptor that polls readable once `seq` has completed; close() it when done. */
NRT_STATUS nrta_get_completion_handle(nrta_seq_t seq, int *fd);

NRT_STATUS nrta_error_tracker_create(uint32_t lnc_idx, nrta_error_tracker_t **error_tracker);
void nrta_error_tracker_destroy(nrta_error_tracker_t *error_tracker);
/* The errors recorded so far (valid until the next call on the tracker or its destroy). */
NRT_STATUS nrta_error_tracker_get_list(nrta_error_tracker_t *error_tracker, const nrta_error_t **list,
                                       size_t *error_count);

#ifdef __cplusplus
}
#endif
