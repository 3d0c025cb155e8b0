/*
 * ndl/neuron_driver_shared_tensor_batch_op.h — one operation of a tensor batch read/write
 * (public libnrt ABI; used by nrt_tensor_read_batch / nrt_tensor_write_batch in nrt.h).
 */
#ifndef NEURON_VFIO_NDL_TENSOR_BATCH_OP_H
#define NEURON_VFIO_NDL_TENSOR_BATCH_OP_H

#include <stdint.h>

typedef uint64_t nrt_tensor_batch_offset_t;
typedef uint64_t nrt_tensor_batch_size_t;

typedef struct nrt_tensor_batch_op {
    nrt_tensor_batch_offset_t offset; /* byte offset in the tensor */
    nrt_tensor_batch_size_t size;     /* bytes */
    void *buffer;                     /* host memory: source (write) or destination (read) */
} nrt_tensor_batch_op_t;

#endif
