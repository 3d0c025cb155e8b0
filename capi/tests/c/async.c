/*
 * nrt_async.h: tensor XUs, executions on the COMPUTE XU, sequence ids, completion handles,
 * error trackers, the async-exec callback, one-rank collectives and drain.
 * usage: async MODEL_1NC.neff INPUT.bin
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_experimental.h"

static int callbacks = 0;
static uint64_t last_job = 0;
static NRT_STATUS last_status = NRT_FAILURE;

static void on_exec(void *params, uint32_t model_id, uint32_t vnc, uint64_t job_id, NRT_STATUS status) {
    (void)model_id;
    (void)vnc;
    *(int *)params += 1;
    last_job = job_id;
    last_status = status;
}

/* Wait for `seq` through a completion handle. */
static int wait_seq(nrta_seq_t seq) {
    int fd = -1;
    if (nrta_get_completion_handle(seq, &fd) != NRT_SUCCESS) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, 20000);
    close(fd);
    return r == 1 && (p.revents & POLLIN);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS, "nrt_init");
    nrta_error_tracker_t *et = NULL;
    CHECK(nrta_error_tracker_create(0, &et) == NRT_SUCCESS, "nrta_error_tracker_create");

    nrt_tensor_t *d = NULL, *e = NULL;
    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "d", &d);
    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "e", &e);
    static uint8_t src[4096], back[4096];
    for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i * 7);
    nrta_seq_t w = 0, c = 0, r = 0;
    CHECK(nrta_tensor_write(d, src, 0, 4096, 0, et, &w) == NRT_SUCCESS, "nrta_tensor_write seq %#lx", (unsigned long)w);
    CHECK(NRTA_SEQ_GET_SEQ_NUM(w) == 1, "first request of an XU has sequence number 1");
    CHECK(wait_seq(w), "write completion handle becomes readable");
    CHECK(nrta_tensor_copy(d, 0, e, 0, 4096, 0, et, &c) == NRT_SUCCESS, "nrta_tensor_copy");
    CHECK(wait_seq(c), "copy completes");
    CHECK(nrta_tensor_read(back, e, 0, 4096, 0, et, &r) == NRT_SUCCESS, "nrta_tensor_read");
    CHECK(wait_seq(r), "read completes");
    CHECK(memcmp(src, back, 4096) == 0, "write -> copy -> read round trip");
    CHECK(NRTA_SEQ_GET_XU_ID(w) != NRTA_SEQ_GET_XU_ID(r), "reads and writes use different XUs");
    bool done = false;
    CHECK(nrta_is_completed(w, &done) == NRT_SUCCESS && done, "nrta_is_completed(write)");
    CHECK(nrta_is_completed(w + 1000, &done) == NRT_INVALID, "nrta_is_completed of a sequence never issued -> 2");
    nrta_seq_t last = 0;
    CHECK(nrta_get_sequence(0, NRTA_XU_TENSOR_WRITE, 0, &last) == NRT_SUCCESS && last == w, "nrta_get_sequence(write XU) == %#lx",
          (unsigned long)last);
    nrta_seq_t w2 = 0;
    CHECK(nrta_tensor_write(d, src, 4000, 200, 0, et, &w2) == NRT_INVALID, "out-of-range write refused when queued -> 2");
    CHECK(nrta_tensor_write(d, src, 0, 16, 16, et, &w2) == NRT_INVALID, "queue 16 -> 2");

    /* executions */
    size_t neff_size = 0, in_size = 0;
    void *neff = read_file(argv[1], &neff_size);
    float *input = read_file(argv[2], &in_size);
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, 0, -1, &model) == NRT_SUCCESS, "nrt_load");
    free(neff);
    CHECK(nrt_register_async_exec_callback(on_exec, &callbacks) == NRT_SUCCESS, "nrt_register_async_exec_callback");
    nrt_tensor_info_array_t *info = NULL;
    nrt_get_model_tensor_info(model, &info);
    nrt_tensor_set_t *ins = NULL, *outs = NULL, *bad = NULL;
    nrt_allocate_tensor_set(&ins);
    nrt_allocate_tensor_set(&outs);
    nrt_allocate_tensor_set(&bad);
    nrt_tensor_t *ts[16] = {0}, *out_t = NULL, *small = NULL;
    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 4, "small", &small);
    size_t out_size = 0;
    uint64_t n = info->tensor_count < 16 ? info->tensor_count : 16;
    for (uint64_t i = 0; i < n; i++) {
        nrt_tensor_info_t *ti = &info->tensor_array[i];
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, ti->size, ti->name, &ts[i]);
        if (ti->usage == NRT_TENSOR_USAGE_INPUT) {
            nrt_tensor_write(ts[i], input, 0, ti->size < in_size ? ti->size : in_size);
            nrt_add_tensor_to_tensor_set(ins, ti->name, ts[i]);
            nrt_add_tensor_to_tensor_set(bad, ti->name, small);
        } else {
            nrt_add_tensor_to_tensor_set(outs, ti->name, ts[i]);
            out_t = ts[i];
            out_size = ti->size;
        }
    }
    nrta_seq_t x1 = 0, x2 = 0;
    CHECK(nrta_execute_schedule(model, ins, outs, 1, et, &x1) == NRT_INVALID, "execute on queue 1 -> 2");
    CHECK(nrta_execute_schedule(model, ins, outs, 0, et, &x1) == NRT_SUCCESS, "nrta_execute_schedule #1");
    CHECK(nrta_execute_schedule(model, ins, outs, 0, et, &x2) == NRT_SUCCESS, "nrta_execute_schedule #2");
    CHECK(NRTA_SEQ_GET_SEQ_NUM(x2) == NRTA_SEQ_GET_SEQ_NUM(x1) + 1 && NRTA_SEQ_GET_XU_ID(x1) == NRTA_SEQ_GET_XU_ID(x2),
          "executions are numbered in order on one XU");
    CHECK(wait_seq(x2), "execution #2 completes");
    CHECK(nrt_async_drain_queued_execs(0) == NRT_SUCCESS, "nrt_async_drain_queued_execs");
    CHECK(callbacks == 2 && last_job == x2 && last_status == NRT_SUCCESS, "callback called per execution (%d)", callbacks);
    CHECK(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &last) == NRT_SUCCESS && last == x2, "nrta_get_sequence(COMPUTE) == #2");
    float *out = malloc(out_size);
    nrt_tensor_read(out_t, out, 0, out_size);
    size_t bad_n = 0;
    for (size_t i = 0; i < out_size / 4 && i < in_size / 4; i++)
        if (out[i] != input[i]) bad_n++;
    CHECK(bad_n == 0, "async execution output == input (%zu mismatches)", bad_n);
    const nrta_error_t *list = NULL;
    size_t nerr = 99;
    CHECK(nrta_error_tracker_get_list(et, &list, &nerr) == NRT_SUCCESS && nerr == 0, "no errors so far");

    /* one-rank collective */
    nrt_tensor_t *ci = NULL, *co = NULL;
    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "ci", &ci);
    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "co", &co);
    nrt_tensor_write(ci, src, 0, 64);
    uint32_t group[1] = {0};
    nrt_cc_comm_t comm = {group, 0, 1, 0, 1, 0};
    nrt_tensor_list_t li = {&ci, 1}, lo = {&co, 1};
    nrt_cc_context_t *ctx = NULL;
    CHECK(nrta_cc_prepare(&comm, &li, &lo, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx) == NRT_SUCCESS, "nrta_cc_prepare");
    nrta_seq_t cs = 0;
    CHECK(nrta_cc_schedule(&ctx, 0, et, &cs) == NRT_SUCCESS && ctx == NULL, "nrta_cc_schedule consumes the context");
    CHECK(wait_seq(cs), "collective completes");
    nrt_tensor_read(co, back, 0, 64);
    CHECK(memcmp(back, src, 64) == 0, "one-rank all-reduce: output == input");
    comm.rank_n = 2;
    CHECK(nrta_cc_prepare(&comm, &li, &lo, NRT_DTYPE_FLOAT32, NRT_OP_ADD, NRT_CC_ALLREDUCE, &ctx) == NRT_INVALID,
          "two-rank communicator -> 2");

    /* a failing execution lands in the error tracker */
    nrta_seq_t xb = 0;
    CHECK(nrta_execute_schedule(model, bad, outs, 0, et, &xb) == NRT_SUCCESS, "schedule an execution with a wrong-size input");
    CHECK(wait_seq(xb), "it completes");
    nrt_async_drain_queued_execs(0);
    CHECK(nrta_error_tracker_get_list(et, &list, &nerr) == NRT_SUCCESS && nerr == 1 && list[0].seq_id == xb &&
              list[0].error_code == NRT_EXEC_BAD_INPUT,
          "error tracker holds (seq, NRT_EXEC_BAD_INPUT) (%zu errors)", nerr);
    CHECK(last_job == xb && last_status == NRT_EXEC_BAD_INPUT, "callback reports the failure");

    nrta_error_tracker_destroy(et);
    nrt_register_async_exec_callback(NULL, NULL);
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    nrt_destroy_tensor_set(&bad);
    for (uint64_t i = 0; i < n; i++) nrt_tensor_free(&ts[i]);
    nrt_tensor_free(&small);
    nrt_tensor_free(&ci);
    nrt_tensor_free(&co);
    nrt_tensor_free(&d);
    nrt_tensor_free(&e);
    nrt_free_model_tensor_info(info);
    nrt_unload(model);
    free(out);
    free(input);
    nrt_close();
    return finish();
}
