/*
 * Logical core numbering in the C API and init/close cycles with handles left alive.
 * Run with NEURON_RT_VISIBLE_CORES set to one core that is not physical core 0: every call
 * names it as core 0 (libnrt renumbers the visible cores from 0).
 * usage: lifecycle MODEL.neff CYCLES
 */
#include <stdint.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_status.h"

/* The process's address-space size in KiB (VmSize), 0 if unreadable. */
static unsigned long vm_size_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kib = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmSize:", 7) == 0) {
            kib = strtoul(line + 7, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kib;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int cycles = atoi(argv[2]);
    size_t neff_size = 0;
    void *neff = read_file(argv[1], &neff_size);

    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, NULL, NULL) == NRT_SUCCESS, "nrt_init");
    uint32_t visible = 0;
    CHECK(nrt_get_visible_nc_count(&visible) == NRT_SUCCESS && visible == 1, "one visible core (%u)", visible);

    /* Logical core 0 is the one visible core. */
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, 0, -1, &model) == NRT_SUCCESS, "nrt_load at logical core 0");
    nrt_model_t *other = NULL;
    NRT_STATUS s = nrt_load(neff, neff_size, 1, -1, &other);
    CHECK(s != NRT_SUCCESS && other == NULL, "nrt_load at logical core 1 (not visible) is refused (%d)", s);
    nrt_model_info_t mi;
    size_t out = 0;
    memset(&mi, 0x5a, sizeof mi);
    CHECK(nrt_get_model_info(model, &mi, sizeof mi, &out) == NRT_SUCCESS && mi.vnc == 0,
          "nrt_get_model_info names the model's core logically (%u)", mi.vnc);
    nrt_vnc_memory_stats_t m0, m1;
    CHECK(nrt_get_vnc_memory_stats(0, &m0, sizeof m0, &out) == NRT_SUCCESS, "vnc 0 memory stats");
    CHECK(nrt_get_vnc_memory_stats(1, &m1, sizeof m1, &out) == NRT_INVALID, "vnc 1 (not visible) memory stats -> 2");
    nrt_tensor_t *t = NULL;
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 1 << 20, "t", &t) == NRT_SUCCESS, "allocate on vnc 0");
    CHECK(nrt_get_vnc_memory_stats(0, &m1, sizeof m1, &out) == NRT_SUCCESS && m1.bytes_used >= m0.bytes_used + (1 << 20),
          "the allocation counts on vnc 0's memory (%zu -> %zu)", m0.bytes_used, m1.bytes_used);
    nrta_error_tracker_t *tr = NULL;
    CHECK(nrta_error_tracker_create(0, &tr) == NRT_SUCCESS, "error tracker on lnc 0");
    nrta_error_tracker_t *tr1 = NULL;
    CHECK(nrta_error_tracker_create(1, &tr1) == NRT_INVALID, "error tracker on lnc 1 (not visible) -> 2");
    nrta_error_tracker_destroy(tr);
    nrt_unload(model);
    nrt_tensor_free(&t);

    /* init/close cycles, each leaving a device tensor and a model alive at nrt_close. */
    unsigned long first = 0;
    nrt_tensor_t *stale = NULL;
    for (int i = 0; i < cycles; i++) {
        if (i > 0) CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, NULL, NULL) == NRT_SUCCESS, "nrt_init again (cycle %d)", i);
        if (stale) {
            CHECK(nrt_tensor_get_size(stale) == 0, "a tensor of an earlier runtime has no size");
            char b[4];
            CHECK(nrt_tensor_read(stale, b, 0, sizeof b) == NRT_INVALID_HANDLE,
                  "reading a tensor of an earlier runtime -> 3");
        }
        nrt_tensor_t *leak = NULL;
        nrt_model_t *m = NULL;
        CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "leak", &leak) == NRT_SUCCESS,
              "allocate (cycle %d)", i);
        CHECK(nrt_tensor_write(leak, "abcd", 0, 4) == NRT_SUCCESS, "write (cycle %d)", i);
        CHECK(nrt_load(neff, neff_size, 0, -1, &m) == NRT_SUCCESS, "load (cycle %d)", i);
        nrt_close();
        char b[4];
        CHECK(nrt_tensor_read(leak, b, 0, sizeof b) == NRT_CLOSED, "reading after nrt_close -> 14 (cycle %d)", i);
        stale = leak;
        unsigned long vm = vm_size_kib();
        if (i == 0) first = vm;
        /* Nothing of a closed runtime stays mapped: the address space does not grow with the
         * cycles (a simulated device maps tens of GiB of sparse HBM). */
        CHECK(vm <= first + (4ul << 20), "address space after cycle %d: %lu KiB (first %lu KiB)", i, vm, first);
    }
    free(neff);
    return finish();
}
