/*
 * nrt/nrt_async_sendrecv.h — asynchronous point-to-point tensor send/receive between logical
 * NeuronCores of different processes or hosts (public libnrt API names and types; experimental
 * in libnrt). In neuron-vfio these run on the libfabric transport of the global communicators
 * (libnrt.so built with the `fabric` feature; otherwise every call returns NRT_FAILURE).
 *
 * Set NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT in both processes: the receiving side of a
 * connection listens on that port + 128 * its lnc + the sender's lnc (docs/fabric.md).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A send or receive communicator (one direction of one connection). */
typedef struct nrt_async_sendrecv_comm nrt_async_sendrecv_comm_t;
/* One queued transfer. */
typedef struct nrt_async_sendrecv_request nrt_async_sendrecv_request_t;

/* *num = how many communicators one logical NeuronCore may have (32 in neuron-vfio; one more
 * connect/accept is NRT_RESOURCE). */
NRT_STATUS nrt_async_sendrecv_get_max_num_communicators_per_lnc(int *num);

/* *num = how many requests of one communicator may be pending, i.e. not yet reported done by
 * nrt_async_sendrecv_test_request (64 in neuron-vfio; one more is NRT_RESOURCE). */
NRT_STATUS nrt_async_sendrecv_get_max_num_pending_request(int *num);

/* Start (init) and end (close) the use of logical NeuronCore `lnc` (0..127). The runtime must be
 * initialised; close before nrt_close (nrt_close also ends every LNC still open). NRT_SUCCESS or
 * NRT_FAILURE. Closing with a communicator not yet connected or a request still in flight is
 * NRT_FAILURE (the communicators are released anyway), and init of that LNC then fails until
 * nrt_close. */
NRT_STATUS nrt_async_sendrecv_init(int lnc);
NRT_STATUS nrt_async_sendrecv_close(int lnc);

/* Create the send (connect) or receive (accept) side of a connection between `lnc` here and
 * `peer_lnc` at `peer_ip`. Returns at once; poll nrt_async_sendrecv_test_comm until connected. */
NRT_STATUS nrt_async_sendrecv_connect(const char *peer_ip, int peer_lnc, int lnc,
                                      nrt_async_sendrecv_comm_t **send_comm);
NRT_STATUS nrt_async_sendrecv_accept(const char *peer_ip, int peer_lnc, int lnc,
                                     nrt_async_sendrecv_comm_t **recv_comm);

/* *done = whether the connection of `comm` is established. */
NRT_STATUS nrt_async_sendrecv_test_comm(nrt_async_sendrecv_comm_t *comm, bool *done);

/* Queue sending / receiving `length` bytes at `offset` of `tensor` (non-blocking; transfers of
 * one communicator run in call order). */
NRT_STATUS nrt_async_sendrecv_send_tensor(nrt_tensor_t *tensor, size_t offset, size_t length,
                                          nrt_async_sendrecv_comm_t *send_comm,
                                          nrt_async_sendrecv_request_t **request);
NRT_STATUS nrt_async_sendrecv_recv_tensor(nrt_tensor_t *tensor, size_t offset, size_t length,
                                          nrt_async_sendrecv_comm_t *recv_comm,
                                          nrt_async_sendrecv_request_t **request);

/* *done = whether `request` completed, *size = bytes moved. A request reported done is released.
 * NRT_TIMEOUT when the transfer did not complete within the time limit, NRT_FAILURE on other
 * transfer errors. */
NRT_STATUS nrt_async_sendrecv_test_request(nrt_async_sendrecv_request_t *request, bool *done, size_t *size);

/* Every receive of `lnc` already tested done has fully arrived in memory when this returns (in
 * neuron-vfio a receive is reported done only after its bytes are written into the tensor). */
NRT_STATUS nrt_async_sendrecv_flush(int lnc);

#ifdef __cplusplus
}
#endif
