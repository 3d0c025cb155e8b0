/*
 * Prints the ABI facts of the headers, one "key value" line each: struct sizes and field
 * offsets, enumerator values and macro values. capi/tests/layout.rs compares them with the
 * Rust #[repr(C)] definitions and with the public libnrt headers' values.
 */
#include <stddef.h>
#include <stdio.h>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_status.h"
#include "nrt/nrt_sys_trace.h"
#include "nrt/nrt_version.h"

#define SZ(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define OFF(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))
#define VAL(e) printf("value %s %lld\n", #e, (long long)(e))

int main(void) {
    SZ(NRT_STATUS);
    SZ(nrt_tensor_info_t);
    OFF(nrt_tensor_info_t, name);
    OFF(nrt_tensor_info_t, usage);
    OFF(nrt_tensor_info_t, size);
    OFF(nrt_tensor_info_t, dtype);
    OFF(nrt_tensor_info_t, shape);
    OFF(nrt_tensor_info_t, ndim);
    SZ(nrt_tensor_info_array_t);
    OFF(nrt_tensor_info_array_t, tensor_array);
    SZ(nrt_version_t);
    OFF(nrt_version_t, rt_maintenance);
    OFF(nrt_version_t, rt_detail);
    OFF(nrt_version_t, git_hash);
    SZ(nrt_instance_info_t);
    OFF(nrt_instance_info_t, size);
    OFF(nrt_instance_info_t, arch_name);
    OFF(nrt_instance_info_t, device_revision);
    SZ(nrt_vnc_memory_stats_t);
    OFF(nrt_vnc_memory_stats_t, bytes_limit);
    SZ(nrt_model_info_t);
    SZ(nrt_tensor_batch_op_t);
    OFF(nrt_tensor_batch_op_t, size);
    OFF(nrt_tensor_batch_op_t, buffer);
    SZ(nrt_tensor_batch_t);
    OFF(nrt_tensor_batch_t, ops);
    OFF(nrt_tensor_batch_t, num_ops);
    SZ(nrt_tensor_device_allocation_info_t);
    OFF(nrt_tensor_device_allocation_info_t, size);
    OFF(nrt_tensor_device_allocation_info_t, hbm_index);
    SZ(nrta_error_t);
    OFF(nrta_error_t, error_code);
    SZ(nrt_cc_comm_t);
    OFF(nrt_cc_comm_t, rank);
    OFF(nrt_cc_comm_t, rank_n);
    OFF(nrt_cc_comm_t, ctx_device_id);
    OFF(nrt_cc_comm_t, ctx_device_count);
    OFF(nrt_cc_comm_t, vnc);
    SZ(nrt_tensor_list_t);
    OFF(nrt_tensor_list_t, num_tensors);
    SZ(nrt_ucode_img);
    SZ(nrt_ucode_info);
    OFF(nrt_ucode_info, dram);
    SZ(nrta_seq_t);
    SZ(nrta_xu_id_t);

    VAL(NRT_SUCCESS); VAL(NRT_FAILURE); VAL(NRT_INVALID); VAL(NRT_INVALID_HANDLE); VAL(NRT_RESOURCE);
    VAL(NRT_TIMEOUT); VAL(NRT_HW_ERROR); VAL(NRT_QUEUE_FULL); VAL(NRT_LOAD_NOT_ENOUGH_NC);
    VAL(NRT_UNSUPPORTED_NEFF_VERSION); VAL(NRT_FAIL_HOST_MEM_ALLOC); VAL(NRT_UNINITIALIZED); VAL(NRT_CLOSED);
    VAL(NRT_QUEUE_EMPTY); VAL(NRT_EXEC_UNIT_UNRECOVERABLE); VAL(NRT_EXEC_BAD_INPUT);
    VAL(NRT_EXEC_COMPLETED_WITH_NUM_ERR); VAL(NRT_EXEC_COMPLETED_WITH_ERR); VAL(NRT_EXEC_NC_BUSY); VAL(NRT_EXEC_OOB);
    VAL(NRT_COLL_PENDING); VAL(NRT_EXEC_HW_ERR_COLLECTIVES); VAL(NRT_EXEC_HW_ERR_HBM_UE); VAL(NRT_EXEC_HW_ERR_NC_UE);
    VAL(NRT_EXEC_HW_ERR_DMA_ABORT); VAL(NRT_EXEC_SW_NQ_OVERFLOW); VAL(NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE);
    VAL(NRT_NETWORK_PROXY_FAILURE);
    VAL(NRT_TENSOR_PLACEMENT_DEVICE); VAL(NRT_TENSOR_PLACEMENT_HOST); VAL(NRT_TENSOR_PLACEMENT_VIRTUAL);
    VAL(NRT_FRAMEWORK_TYPE_INVALID); VAL(NRT_FRAMEWORK_TYPE_NO_FW); VAL(NRT_FRAMEWORK_TYPE_TENSORFLOW);
    VAL(NRT_FRAMEWORK_TYPE_PYTORCH); VAL(NRT_FRAMEWORK_TYPE_MXNET); VAL(NRT_FRAMEWORK_TYPE_PRECHECK);
    VAL(NRT_INSTANCE_UNKNOWN); VAL(NRT_INSTANCE_INF1); VAL(NRT_INSTANCE_TRN1); VAL(NRT_INSTANCE_TRN1N);
    VAL(NRT_INSTANCE_INF2); VAL(NRT_INSTANCE_TRN2); VAL(NRT_INSTANCE_TRN2N); VAL(NRT_INSTANCE_INF2E);
    VAL(NRT_INSTANCE_TRN2P); VAL(NRT_INSTANCE_TRN2U); VAL(NRT_INSTANCE_TRN2E); VAL(NRT_INSTANCE_TRN2EU);
    VAL(NRT_INSTANCE_TRN2AC); VAL(NRT_INSTANCE_TRN2UAC); VAL(NRT_INSTANCE_TRN3); VAL(NRT_INSTANCE_TRN3PDS98);
    VAL(NRT_INSTANCE_SIZE_1XL); VAL(NRT_INSTANCE_SIZE_2XL); VAL(NRT_INSTANCE_SIZE_4XL); VAL(NRT_INSTANCE_SIZE_6XL);
    VAL(NRT_INSTANCE_SIZE_8XL); VAL(NRT_INSTANCE_SIZE_24XL); VAL(NRT_INSTANCE_SIZE_32XL); VAL(NRT_INSTANCE_SIZE_48XL);
    VAL(NRT_INSTANCE_SIZE_3XL); VAL(NRT_INSTANCE_SIZE_UNKNOWN); VAL(NRT_INSTANCE_SIZE_NUM);
    VAL(NRT_OP_ADD); VAL(NRT_OP_FMA); VAL(NRT_OP_MAX); VAL(NRT_OP_MIN); VAL(NRT_OP_INVALID);
    VAL(NRT_DTYPE_UNKNOWN); VAL(NRT_DTYPE_INVALID); VAL(NRT_DTYPE_FP8_E3); VAL(NRT_DTYPE_FP8_E4); VAL(NRT_DTYPE_FP8_E5);
    VAL(NRT_DTYPE_FLOAT16); VAL(NRT_DTYPE_BFLOAT16); VAL(NRT_DTYPE_FLOAT32); VAL(NRT_DTYPE_FP32R); VAL(NRT_DTYPE_UINT8);
    VAL(NRT_DTYPE_UINT16); VAL(NRT_DTYPE_UINT32); VAL(NRT_DTYPE_UINT64); VAL(NRT_DTYPE_INT8); VAL(NRT_DTYPE_INT16);
    VAL(NRT_DTYPE_INT32); VAL(NRT_DTYPE_INT64);
    VAL(NRT_CC_ALLGATHER); VAL(NRT_CC_ALLREDUCE); VAL(NRT_CC_REDUCESCATTER);
    VAL(NRT_TENSOR_USAGE_INPUT); VAL(NRT_TENSOR_USAGE_OUTPUT);
    VAL(NRTA_XU_TENSOR_READ); VAL(NRTA_XU_TENSOR_WRITE); VAL(NRTA_XU_TENSOR_OP); VAL(NRTA_XU_COMPUTE);
    VAL(NRTA_XU_COLLECTIVES); VAL(NRTA_XU_TYPE_NUM);
    VAL(NRT_MAJOR_VERSION); VAL(NRT_MINOR_VERSION); VAL(NRT_TENSOR_NAME_MAX); VAL(RT_VERSION_DETAIL_LEN);
    VAL(GIT_HASH_LEN); VAL(NRTA_SEQ_NUM_MAX); VAL(NRTA_SEQ_GET_XU_ID(0xABCD000000000001ull));
    VAL(NRTA_SEQ_GET_SEQ_NUM(0xABCD000000000001ull));
    return 0;
}
