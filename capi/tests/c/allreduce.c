/*
 * An ordinary libnrt client: load a NEFF, bind tensors from the model's tensor info,
 * execute, check the output. Run by capi/tests/c_program.rs against neuron-vfio's libnrt.so.
 *
 * usage: allreduce ALLREDUCE_1NC.neff ALLREDUCE_2NC.neff INPUT_32xf32.bin
 * Prints one line per check; exits 0 only if all pass ("ALL OK" last).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_version.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            printf("ok   ");                                                               \
        } else {                                                                           \
            printf("FAIL ");                                                               \
            failures++;                                                                    \
        }                                                                                  \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
    } while (0)

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Load `neff_path`, feed `input` to every input, expect every output == factor * input. */
static void run_model(const char *neff_path, const float *input, size_t input_size, float factor) {
    size_t neff_size = 0;
    void *neff = read_file(neff_path, &neff_size);
    nrt_model_t *model = NULL;
    NRT_STATUS s = nrt_load(neff, neff_size, -1, -1, &model);
    CHECK(s == NRT_SUCCESS && model != NULL, "nrt_load %s -> %d", neff_path, s);
    free(neff);
    if (s != NRT_SUCCESS) return;

    uint32_t ncs = 0;
    s = nrt_get_model_nc_count(model, &ncs);
    CHECK(s == NRT_SUCCESS, "nrt_get_model_nc_count -> %d (%u NCs)", s, ncs);

    nrt_tensor_info_array_t *info = NULL;
    s = nrt_get_model_tensor_info(model, &info);
    CHECK(s == NRT_SUCCESS && info != NULL, "nrt_get_model_tensor_info -> %d", s);
    if (s != NRT_SUCCESS) return;

    nrt_tensor_set_t *ins = NULL, *outs = NULL;
    CHECK(nrt_allocate_tensor_set(&ins) == NRT_SUCCESS, "nrt_allocate_tensor_set (inputs)");
    CHECK(nrt_allocate_tensor_set(&outs) == NRT_SUCCESS, "nrt_allocate_tensor_set (outputs)");

    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        int is_in = t->usage == NRT_TENSOR_USAGE_INPUT;
        printf("     tensor %s: %s, %zu bytes, dtype %d, shape [", t->name, is_in ? "input" : "output", t->size,
               (int)t->dtype);
        for (uint32_t d = 0; d < t->ndim; d++) printf(d ? ", %u" : "%u", t->shape[d]);
        printf("]\n");
        nrt_tensor_t *tensor = NULL;
        s = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, t->size, t->name, &tensor);
        CHECK(s == NRT_SUCCESS && nrt_tensor_get_size(tensor) == t->size, "nrt_tensor_allocate %s -> %d", t->name,
              s);
        if (is_in) {
            CHECK(t->size == input_size, "input %s is %zu bytes", t->name, t->size);
            s = nrt_tensor_write(tensor, input, 0, input_size);
            CHECK(s == NRT_SUCCESS, "nrt_tensor_write %s -> %d", t->name, s);
        }
        s = nrt_add_tensor_to_tensor_set(is_in ? ins : outs, t->name, tensor);
        CHECK(s == NRT_SUCCESS, "nrt_add_tensor_to_tensor_set %s -> %d", t->name, s);
    }

    s = nrt_execute(model, ins, outs);
    CHECK(s == NRT_SUCCESS, "nrt_execute -> %d", s);
    s = nrt_execute_repeat(model, ins, outs, 3);
    CHECK(s == NRT_SUCCESS, "nrt_execute_repeat x3 -> %d", s);

    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        nrt_tensor_t *tensor = NULL;
        s = nrt_get_tensor_from_tensor_set(t->usage == NRT_TENSOR_USAGE_INPUT ? ins : outs, t->name, &tensor);
        CHECK(s == NRT_SUCCESS && tensor != NULL, "nrt_get_tensor_from_tensor_set %s -> %d", t->name, s);
        if (t->usage == NRT_TENSOR_USAGE_OUTPUT) {
            float *out = calloc(1, t->size);
            s = nrt_tensor_read(tensor, out, 0, t->size);
            CHECK(s == NRT_SUCCESS, "nrt_tensor_read %s -> %d", t->name, s);
            size_t n = t->size / sizeof(float), bad = 0;
            for (size_t k = 0; k < n && k < input_size / sizeof(float); k++)
                if (out[k] != factor * input[k]) bad++;
            CHECK(bad == 0 && t->size == input_size, "output %s == %gx input (%zu mismatches; out[0]=%g out[%zu]=%g)",
                  t->name, factor, bad, out[0], n - 1, out[n - 1]);
            free(out);
        }
        nrt_tensor_free(&tensor);
        CHECK(tensor == NULL, "nrt_tensor_free %s", t->name);
    }
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    CHECK(ins == NULL && outs == NULL, "nrt_destroy_tensor_set");
    CHECK(nrt_free_model_tensor_info(info) == NRT_SUCCESS, "nrt_free_model_tensor_info");
    s = nrt_unload(model);
    CHECK(s == NRT_SUCCESS, "nrt_unload -> %d", s);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s ALLREDUCE_1NC.neff ALLREDUCE_2NC.neff INPUT.bin\n", argv[0]);
        return 2;
    }
    /* The layout libnrt callers compile against (LP64). */
    CHECK(sizeof(nrt_tensor_info_t) == 296 && offsetof(nrt_tensor_info_t, size) == 264 &&
              offsetof(nrt_tensor_info_t, shape) == 280 && offsetof(nrt_tensor_info_array_t, tensor_array) == 8,
          "nrt_tensor_info_t layout (%zu bytes)", sizeof(nrt_tensor_info_t));

    size_t input_size = 0;
    float *input = read_file(argv[3], &input_size);
    size_t neff_size = 0;
    void *neff = read_file(argv[1], &neff_size);
    nrt_model_t *model = NULL;

    /* Before nrt_init. */
    NRT_STATUS s = nrt_load(neff, neff_size, -1, -1, &model);
    CHECK(s == NRT_UNINITIALIZED, "nrt_load before nrt_init -> %d (want %d)", s, NRT_UNINITIALIZED);
    uint32_t total = 0, visible = 0;
    s = nrt_get_total_nc_count(&total);
    CHECK(s == NRT_SUCCESS && total > 0, "nrt_get_total_nc_count before nrt_init -> %d (%u)", s, total);

    nrt_version_t ver;
    memset(&ver, 0, sizeof ver);
    s = nrt_get_version(&ver, sizeof ver);
    CHECK(s == NRT_SUCCESS && ver.rt_major == 2, "nrt_get_version -> %d: %llu.%llu.%llu (%s)", s,
          (unsigned long long)ver.rt_major, (unsigned long long)ver.rt_minor, (unsigned long long)ver.rt_patch,
          ver.rt_detail);

    s = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    CHECK(s == NRT_SUCCESS, "nrt_init -> %d", s);
    if (s != NRT_SUCCESS) return 1;
    s = nrt_get_visible_nc_count(&visible);
    CHECK(s == NRT_SUCCESS && visible == total, "nrt_get_visible_nc_count -> %d (%u of %u)", s, visible, total);

    run_model(argv[1], input, input_size, 1.0f);
    run_model(argv[2], input, input_size, 2.0f);

    /* Misuse while initialised. */
    s = nrt_unload(NULL);
    CHECK(s == NRT_INVALID || s == NRT_INVALID_HANDLE, "nrt_unload(NULL) -> %d", s);
    s = nrt_execute(NULL, NULL, NULL);
    CHECK(s == NRT_INVALID || s == NRT_INVALID_HANDLE, "nrt_execute(NULL model) -> %d", s);
    s = nrt_get_model_tensor_info(NULL, NULL);
    CHECK(s == NRT_INVALID || s == NRT_INVALID_HANDLE, "nrt_get_model_tensor_info(NULL) -> %d", s);
    s = nrt_load(NULL, 0, -1, -1, &model);
    CHECK(s == NRT_INVALID, "nrt_load(NULL bytes) -> %d", s);
    s = nrt_tensor_read(NULL, input, 0, 4);
    CHECK(s == NRT_INVALID || s == NRT_INVALID_HANDLE, "nrt_tensor_read(NULL tensor) -> %d", s);
    CHECK(nrt_tensor_get_size(NULL) == 0, "nrt_tensor_get_size(NULL) == 0");
    nrt_tensor_free(NULL);
    nrt_destroy_tensor_set(NULL);

    /* A model left loaded is unloaded by nrt_close. */
    s = nrt_load(neff, neff_size, -1, -1, &model);
    CHECK(s == NRT_SUCCESS, "nrt_load (left loaded) -> %d", s);
    nrt_close();

    s = nrt_load(neff, neff_size, -1, -1, &model);
    CHECK(s == NRT_CLOSED, "nrt_load after nrt_close -> %d (want %d)", s, NRT_CLOSED);
    s = nrt_unload(model);
    CHECK(s == NRT_CLOSED, "nrt_unload after nrt_close -> %d (want %d)", s, NRT_CLOSED);

    free(neff);
    free(input);
    if (failures) {
        printf("%d FAILED\n", failures);
        return 1;
    }
    printf("ALL OK\n");
    return 0;
}
