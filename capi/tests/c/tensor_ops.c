/*
 * Tensor operations: batches, memset, copy, slices, empty tensors with attached buffers,
 * addresses, device allocation info, dma-buf fds and output completion.
 * usage: tensor_ops MODEL_1NC.neff INPUT.bin
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"

static int all_eq(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS, "nrt_init");
    uint32_t ncs = 0;
    nrt_get_total_nc_count(&ncs);

    nrt_tensor_t *h = NULL, *d = NULL, *e = NULL;
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 256, "h", &h) == NRT_SUCCESS, "allocate host tensor");
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 256, "d", &d) == NRT_SUCCESS, "allocate device tensor");
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 256, "e", &e) == NRT_SUCCESS, "allocate second device tensor");

    /* batches */
    uint8_t a[64], b[32], ra[64], rb[32];
    for (int i = 0; i < 64; i++) a[i] = (uint8_t)i;
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(200 + i);
    nrt_tensor_batch_op_t wops[2] = {{0, 64, a}, {128, 32, b}};
    nrt_tensor_batch_op_t rops[2] = {{0, 64, ra}, {128, 32, rb}};
    nrt_tensor_batch_t wb = {d, wops, 2}, rbt = {d, rops, 2};
    CHECK(nrt_tensor_write_batch(&wb, 1, false) == NRT_SUCCESS, "nrt_tensor_write_batch (2 ops)");
    CHECK(nrt_tensor_read_batch(&rbt, 1, false) == NRT_SUCCESS && memcmp(a, ra, 64) == 0 && memcmp(b, rb, 32) == 0,
          "nrt_tensor_read_batch reads back both ops");
    nrt_tensor_batch_op_t bad = {250, 16, a};
    nrt_tensor_batch_t badb[2] = {{d, wops, 1}, {d, &bad, 1}};
    memset(ra, 0, sizeof ra);
    nrt_tensor_write(d, ra, 0, 64);
    CHECK(nrt_tensor_write_batch(badb, 2, false) == NRT_INVALID, "a batch with an out-of-range op -> 2");
    uint8_t chk[64];
    nrt_tensor_read(d, chk, 0, 64);
    CHECK(all_eq(chk, 64, 0), "a rejected batch writes nothing");

    /* memset */
    CHECK(nrt_tensor_memset(d, 16, 0x1AB, 32) == NRT_SUCCESS, "nrt_tensor_memset");
    uint8_t m[64];
    nrt_tensor_read(d, m, 0, 64);
    CHECK(all_eq(m, 16, 0) && all_eq(m + 16, 32, 0xAB) && all_eq(m + 48, 16, 0), "memset wrote (unsigned char)value in range only");
    CHECK(nrt_tensor_memset(d, 250, 0, 16) == NRT_INVALID, "memset out of range -> 2");

    /* copy */
    for (int i = 0; i < 64; i++) a[i] = (uint8_t)(i * 3);
    nrt_tensor_write(h, a, 0, 64);
    CHECK(nrt_tensor_copy(h, 0, d, 64, 64) == NRT_SUCCESS, "copy host -> device");
    CHECK(nrt_tensor_copy(d, 64, e, 0, 64) == NRT_SUCCESS, "copy device -> device (same NC)");
    nrt_tensor_read(e, ra, 0, 64);
    CHECK(memcmp(a, ra, 64) == 0, "copied bytes arrive");
    CHECK(nrt_tensor_copy(d, 200, e, 0, 64) == NRT_INVALID, "copy out of range -> 2");
    if (ncs >= 2) {
        nrt_tensor_t *f = NULL;
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 1, 256, "f", &f);
        CHECK(nrt_tensor_copy(d, 0, f, 0, 64) == NRT_INVALID, "copy between device tensors of different NCs -> 2");
        nrt_tensor_free(&f);
    }

    /* slices */
    nrt_tensor_t *s = NULL;
    CHECK(nrt_tensor_allocate_slice(d, 192, 64, "s", &s) == NRT_SUCCESS && nrt_tensor_get_size(s) == 64, "slice of 64 bytes");
    nrt_tensor_write(s, a, 0, 64);
    nrt_tensor_read(d, ra, 192, 64);
    CHECK(memcmp(a, ra, 64) == 0, "writes through a slice land in the source");
    nrt_tensor_t *s2 = NULL;
    CHECK(nrt_tensor_allocate_slice(d, 200, 64, "s2", &s2) == NRT_INVALID, "slice beyond the source -> 2");
    CHECK(nrt_tensor_write(s, a, 32, 64) == NRT_INVALID, "writes beyond the slice -> 2");

    /* addresses */
    void *hva = nrt_tensor_get_va(h);
    CHECK(hva != NULL && memcmp(hva, a, 64) == 0, "nrt_tensor_get_va of a host tensor shows its bytes");
    CHECK(nrt_tensor_get_va(d) == NULL, "nrt_tensor_get_va of a device tensor -> NULL (not mapped)");
    uint8_t z[16] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
    CHECK(nrt_memcpy_to_device((uint8_t *)hva + 8, z, 16) == NRT_SUCCESS, "nrt_memcpy_to_device into get_va memory");
    nrt_tensor_read(h, ra, 8, 16);
    CHECK(all_eq(ra, 16, 9), "memcpy_to_device bytes visible through nrt_tensor_read");
    CHECK(nrt_memcpy_to_device(z, z, 16) == NRT_INVALID, "memcpy_to_device to foreign memory -> 2");
    nrt_tensor_device_allocation_info_t ai;
    CHECK(nrt_tensor_get_device_allocation_info(d, &ai) == NRT_SUCCESS && ai.size >= 256 && ai.physical_address != 0,
          "device allocation info (addr %#lx, %zu bytes, hbm %d)", (unsigned long)ai.physical_address, ai.size, ai.hbm_index);
    nrt_tensor_device_allocation_info_t si;
    CHECK(nrt_tensor_get_device_allocation_info(s, &si) == NRT_SUCCESS && si.physical_address == ai.physical_address + 192,
          "a slice's device address is the source's + offset");
    CHECK(nrt_tensor_get_device_allocation_info(h, &si) == NRT_INVALID, "device allocation info of a host tensor -> 2");

    /* dma-buf fd of device memory */
    int fd = -1;
    CHECK(nrt_get_dmabuf_fd(ai.physical_address + 192, 64, &fd) == NRT_SUCCESS && fd >= 0, "nrt_get_dmabuf_fd");
    if (fd >= 0) {
        memset(ra, 0, 64);
        CHECK(pread(fd, ra, 64, 0) == 64 && memcmp(ra, a, 64) == 0, "the fd holds the device bytes");
        close(fd);
    }
    CHECK(nrt_get_dmabuf_fd(0x10, 64, &fd) == NRT_INVALID, "nrt_get_dmabuf_fd of unknown memory -> 2");

    /* empty tensors + attached buffers */
    nrt_tensor_t *u = NULL;
    CHECK(nrt_tensor_allocate_empty("u", &u) == NRT_SUCCESS && nrt_tensor_get_size(u) == 0, "nrt_tensor_allocate_empty");
    CHECK(nrt_tensor_write(u, a, 0, 1) == NRT_INVALID, "writing an empty tensor -> 2");
    uint8_t *mem = calloc(1, 128);
    CHECK(nrt_tensor_attach_buffer(u, mem, 128) == NRT_SUCCESS && nrt_tensor_get_size(u) == 128, "nrt_tensor_attach_buffer");
    CHECK(nrt_tensor_get_va(u) == mem, "get_va of an attached buffer is the buffer");
    CHECK(nrt_tensor_write(u, a, 4, 32) == NRT_SUCCESS && memcmp(mem + 4, a, 32) == 0, "writes land in the caller's buffer");
    CHECK(nrt_tensor_copy(e, 0, u, 64, 64) == NRT_SUCCESS && memcmp(mem + 64, a, 64) == 0, "copy device -> attached buffer");

    /* output completion over executions */
    size_t neff_size = 0, in_size = 0;
    void *neff = read_file(argv[1], &neff_size);
    void *input = read_file(argv[2], &in_size);
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, 0, -1, &model) == NRT_SUCCESS, "nrt_load");
    nrt_tensor_info_array_t *info = NULL;
    nrt_get_model_tensor_info(model, &info);
    nrt_tensor_set_t *ins = NULL, *outs = NULL, *bad_ins = NULL;
    nrt_allocate_tensor_set(&ins);
    nrt_allocate_tensor_set(&outs);
    nrt_allocate_tensor_set(&bad_ins);
    nrt_tensor_t *tensors[16] = {0};
    nrt_tensor_t *out_t = NULL;
    uint64_t n = info->tensor_count < 16 ? info->tensor_count : 16;
    for (uint64_t i = 0; i < n; i++) {
        nrt_tensor_info_t *ti = &info->tensor_array[i];
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, ti->size, ti->name, &tensors[i]);
        if (ti->usage == NRT_TENSOR_USAGE_INPUT) {
            nrt_tensor_write(tensors[i], input, 0, ti->size < in_size ? ti->size : in_size);
            nrt_add_tensor_to_tensor_set(ins, ti->name, tensors[i]);
            nrt_add_tensor_to_tensor_set(bad_ins, ti->name, u);
        } else {
            nrt_add_tensor_to_tensor_set(outs, ti->name, tensors[i]);
            out_t = tensors[i];
        }
    }
    CHECK(out_t != NULL, "model has an output");
    CHECK(nrt_tensor_check_output_completion(out_t, 0, 1) == NRT_TIMEOUT, "no completion before an execution -> 5");
    CHECK(nrt_execute(model, ins, outs) == NRT_SUCCESS, "nrt_execute");
    CHECK(nrt_tensor_check_output_completion(out_t, 1000000, 1) == NRT_SUCCESS, "one completion after one execution");
    CHECK(nrt_execute(model, ins, outs) == NRT_SUCCESS, "nrt_execute again");
    CHECK(nrt_tensor_check_output_completion(out_t, 0, 2) == NRT_SUCCESS, "two completions");
    CHECK(nrt_tensor_check_output_completion(out_t, 1000, 3) == NRT_TIMEOUT, "not three -> 5 after the timeout");
    CHECK(nrt_tensor_reset_output_completion(out_t) == NRT_SUCCESS, "reset");
    CHECK(nrt_tensor_check_output_completion(out_t, 0, 1) == NRT_TIMEOUT, "reset to 0");
    CHECK(nrt_tensor_check_output_completion(NULL, 0, 1) == NRT_INVALID, "NULL tensor -> 2");
    CHECK(nrt_execute(model, bad_ins, outs) == NRT_EXEC_BAD_INPUT, "an attached host buffer as execution input -> 1002");

    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    nrt_destroy_tensor_set(&bad_ins);
    for (uint64_t i = 0; i < n; i++) nrt_tensor_free(&tensors[i]);
    nrt_free_model_tensor_info(info);
    nrt_unload(model);
    free(neff);
    free(input);
    nrt_tensor_free(&u);
    free(mem);
    nrt_tensor_free(&s);
    nrt_tensor_free(&h);
    nrt_tensor_free(&d);
    nrt_tensor_free(&e);
    CHECK(d == NULL && s == NULL, "nrt_tensor_free NULLs the handles");
    nrt_close();
    return finish();
}
