/*
 * A minimal libnrt client: load a NEFF, bind host tensors from the model's tensor info,
 * execute once, and print every output element. Built by tests/cmake/CMakeLists.txt.
 *
 * usage: nrt_client MODEL.neff INPUT.bin     (every input is fed INPUT.bin's bytes)
 * Prints "output NAME: v0 v1 ..." per output; exits non-zero on any failing call.
 */
#include <stdio.h>
#include <stdlib.h>

#include <nrt/nrt.h>
#include <nrt/nrt_experimental.h>

static void *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || n < 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        NRT_STATUS s_ = (call);                                                            \
        if (s_ != NRT_SUCCESS) {                                                           \
            fprintf(stderr, "%s -> %d\n", #call, (int)s_);                                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.neff INPUT.bin\n", argv[0]);
        return 2;
    }
    size_t neff_size = 0, input_size = 0;
    void *neff = slurp(argv[1], &neff_size);
    void *input = slurp(argv[2], &input_size);

    TRY(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
    nrt_model_t *model = NULL;
    TRY(nrt_load(neff, neff_size, -1, -1, &model));
    nrt_tensor_info_array_t *info = NULL;
    TRY(nrt_get_model_tensor_info(model, &info));
    nrt_tensor_set_t *ins = NULL, *outs = NULL;
    TRY(nrt_allocate_tensor_set(&ins));
    TRY(nrt_allocate_tensor_set(&outs));
    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        nrt_tensor_t *tensor = NULL;
        TRY(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, t->size, t->name, &tensor));
        if (t->usage == NRT_TENSOR_USAGE_INPUT) {
            if (t->size != input_size) {
                fprintf(stderr, "input %s is %zu bytes, %s has %zu\n", t->name, t->size, argv[2], input_size);
                return 1;
            }
            TRY(nrt_tensor_write(tensor, input, 0, input_size));
        }
        TRY(nrt_add_tensor_to_tensor_set(t->usage == NRT_TENSOR_USAGE_INPUT ? ins : outs, t->name, tensor));
    }
    TRY(nrt_execute(model, ins, outs));
    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        nrt_tensor_t *tensor = NULL;
        TRY(nrt_get_tensor_from_tensor_set(t->usage == NRT_TENSOR_USAGE_INPUT ? ins : outs, t->name, &tensor));
        if (t->usage == NRT_TENSOR_USAGE_OUTPUT) {
            float *out = malloc(t->size);
            if (!out) return 1;
            TRY(nrt_tensor_read(tensor, out, 0, t->size));
            printf("output %s:", t->name);
            for (size_t k = 0; k < t->size / sizeof(float); k++) printf(" %.9g", out[k]);
            printf("\n");
            free(out);
        }
        nrt_tensor_free(&tensor);
    }
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    TRY(nrt_free_model_tensor_info(info));
    TRY(nrt_unload(model));
    nrt_close();
    free(neff);
    free(input);
    return 0;
}
