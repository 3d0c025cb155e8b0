/*
 * Logical NeuronCores through the C API (docs/lifecycle.md, "Logical NeuronCores"), run by
 * capi/tests/c_api.rs on a simulated Trn2 (cayman) with the environment the test names.
 * usage: lnc LNC2.neff LNC1.neff INPUT.bin TOTAL VISIBLE
 *   TOTAL, VISIBLE: what nrt_get_total_vnc_count / nrt_get_visible_vnc_count must say.
 * The LNC=2 NEFF (one logical core: two graphs, sums) runs on the first visible logical core
 * and on the last one; the LNC=1 NEFF is refused with NRT_INVALID at LNC=2.
 */
#include <stdint.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_status.h"

static int run_on(nrt_model_t *model, int vnc, const float *in) {
    nrt_tensor_t *ti = NULL, *to = NULL;
    nrt_tensor_set_t *ins = NULL, *outs = NULL;
    float out[32];
    int bad = 0;
    if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, 128, "input", &ti) != NRT_SUCCESS) return -1;
    if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, 128, "output", &to) != NRT_SUCCESS) return -1;
    nrt_tensor_write(ti, in, 0, 128);
    nrt_allocate_tensor_set(&ins);
    nrt_allocate_tensor_set(&outs);
    nrt_add_tensor_to_tensor_set(ins, "input", ti);
    nrt_add_tensor_to_tensor_set(outs, "output", to);
    NRT_STATUS s = nrt_execute(model, ins, outs);
    nrt_tensor_read(to, out, 0, 128);
    for (int i = 0; i < 32; i++) bad += out[i] != 2.0f * in[i];
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    nrt_tensor_free(&ti);
    nrt_tensor_free(&to);
    return s == NRT_SUCCESS ? bad : -1;
}

int main(int argc, char **argv) {
    if (argc != 6) return 2;
    size_t lnc2_size = 0, lnc1_size = 0, in_size = 0;
    void *lnc2 = read_file(argv[1], &lnc2_size);
    void *lnc1 = read_file(argv[2], &lnc1_size);
    float *in = read_file(argv[3], &in_size);
    uint32_t want_total = (uint32_t)atoi(argv[4]), want_visible = (uint32_t)atoi(argv[5]);

    uint32_t total = 0, visible = 0, nc_total = 0;
    /* Before nrt_init the counts come from the environment and the device. */
    CHECK(nrt_get_total_vnc_count(&total) == NRT_SUCCESS && total == want_total,
          "nrt_get_total_vnc_count before nrt_init: %u (want %u)", total, want_total);
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, NULL, NULL) == NRT_SUCCESS, "nrt_init");
    CHECK(nrt_get_total_vnc_count(&total) == NRT_SUCCESS && total == want_total, "nrt_get_total_vnc_count %u (want %u)",
          total, want_total);
    CHECK(nrt_get_total_nc_count(&nc_total) == NRT_SUCCESS && nc_total == total,
          "nrt_get_total_nc_count (deprecated twin) %u", nc_total);
    CHECK(nrt_get_visible_vnc_count(&visible) == NRT_SUCCESS && visible == want_visible,
          "nrt_get_visible_vnc_count %u (want %u)", visible, want_visible);
    uint32_t nc_visible = 0;
    CHECK(nrt_get_visible_nc_count(&nc_visible) == NRT_SUCCESS && nc_visible == visible,
          "nrt_get_visible_nc_count (deprecated twin) %u", nc_visible);

    int last = (int)visible - 1;
    for (int vnc = 0; vnc <= last; vnc += last > 0 ? last : 1) {
        nrt_model_t *model = NULL;
        CHECK(nrt_load(lnc2, lnc2_size, vnc, 1, &model) == NRT_SUCCESS, "nrt_load LNC=2 NEFF on vnc %d", vnc);
        uint32_t mv = 0;
        CHECK(nrt_get_model_vnc_count(model, &mv) == NRT_SUCCESS && mv == 1, "nrt_get_model_vnc_count %u (want 1)", mv);
        nrt_model_info_t mi;
        size_t out_len = 0;
        CHECK(nrt_get_model_info(model, &mi, sizeof mi, &out_len) == NRT_SUCCESS && (int)mi.vnc == vnc,
              "nrt_get_model_info vnc %u", mi.vnc);
        int bad = run_on(model, vnc, in);
        CHECK(bad == 0, "output == 2x input on vnc %d (%d mismatches)", vnc, bad);
        CHECK(nrt_unload(model) == NRT_SUCCESS, "nrt_unload");
        if (last == 0) break;
    }
    nrt_model_t *none = NULL;
    CHECK(nrt_load(lnc2, lnc2_size, (int)visible, 1, &none) != NRT_SUCCESS && none == NULL,
          "nrt_load past the last visible logical core is refused");
    nrt_model_t *m1 = NULL;
    NRT_STATUS s = nrt_load(lnc1, lnc1_size, 0, 1, &m1);
    CHECK(s == NRT_INVALID && m1 == NULL, "an LNC=1 NEFF at LNC=2 is refused with NRT_INVALID (%d)", s);
    nrt_close();
    free(lnc2);
    free(lnc1);
    free(in);
    return finish();
}
