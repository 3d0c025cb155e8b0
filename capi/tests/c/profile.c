/*
 * Profiling and system trace: nrt_profile_start/stop, nrt_trace_start/stop, inspect
 * (options and environment) and continuous profiling (the system trace: sys_trace.c).
 * usage: profile MODEL_1NC.neff INPUT.bin OUTPUT_DIR
 * Prints "file <path>" for every trace it wrote (the Rust test parses them).
 */
#include <stdint.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_profile.h"

static nrt_model_t *model;
static nrt_tensor_set_t *ins, *outs;

static void execute(int n) {
    for (int i = 0; i < n; i++) CHECK(nrt_execute(model, ins, outs) == NRT_SUCCESS, "nrt_execute");
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    size_t n = 0;
    return read_file(path, &n);
}

static void expect_trace(const char *path, int execs) {
    char *t = slurp(path);
    CHECK(t != NULL, "trace written to %s", path);
    if (!t) return;
    printf("file %s\n", path);
    CHECK(count_of(t, "\"cat\":\"model_exec\"") == execs, "%s: %d executions (found %d)", path, execs,
          count_of(t, "\"cat\":\"model_exec\""));
    CHECK(count_of(t, "\"cat\":\"device_exec\"") >= execs, "%s: per-engine device spans (%d)", path,
          count_of(t, "\"cat\":\"device_exec\""));
    free(t);
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    const char *dir = argv[3];
    char path[4096];
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS, "nrt_init");
    size_t neff_size = 0, in_size = 0;
    void *neff = read_file(argv[1], &neff_size);
    void *input = read_file(argv[2], &in_size);
    CHECK(nrt_load(neff, neff_size, 0, -1, &model) == NRT_SUCCESS, "nrt_load");
    free(neff);
    nrt_tensor_info_array_t *info = NULL;
    nrt_get_model_tensor_info(model, &info);
    nrt_allocate_tensor_set(&ins);
    nrt_allocate_tensor_set(&outs);
    nrt_tensor_t *ts[16] = {0};
    uint64_t n = info->tensor_count < 16 ? info->tensor_count : 16;
    for (uint64_t i = 0; i < n; i++) {
        nrt_tensor_info_t *ti = &info->tensor_array[i];
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, ti->size, ti->name, &ts[i]);
        if (ti->usage == NRT_TENSOR_USAGE_INPUT) {
            nrt_tensor_write(ts[i], input, 0, ti->size < in_size ? ti->size : in_size);
            nrt_add_tensor_to_tensor_set(ins, ti->name, ts[i]);
        } else {
            nrt_add_tensor_to_tensor_set(outs, ti->name, ts[i]);
        }
    }

    /* nrt_profile_start / stop */
    snprintf(path, sizeof path, "%s/profile.json", dir);
    CHECK(nrt_profile_stop(path) == NRT_INVALID, "nrt_profile_stop without a start -> 2");
    CHECK(nrt_profile_start(model, path) == NRT_SUCCESS, "nrt_profile_start");
    execute(2);
    CHECK(nrt_profile_stop(path) == NRT_SUCCESS, "nrt_profile_stop");
    expect_trace(path, 2);
    execute(1); /* not profiled */

    /* nrt_trace_start / stop */
    snprintf(path, sizeof path, "%s/trace.json", dir);
    CHECK(nrt_trace_start(false) == NRT_SUCCESS, "nrt_trace_start");
    execute(1);
    CHECK(nrt_trace_stop(path) == NRT_SUCCESS, "nrt_trace_stop");
    expect_trace(path, 1);

    /* inspect with options */
    nrt_inspect_config_t *ic = NULL;
    CHECK(nrt_inspect_config_allocate(&ic) == NRT_SUCCESS, "nrt_inspect_config_allocate");
    const char **types = NULL;
    size_t nt = 0;
    CHECK(nrt_inspect_config_get_all_activity_types(&types, &nt) == NRT_SUCCESS && nt == 4 &&
              strcmp(types[0], "system_profile") == 0,
          "activity types (%zu)", nt);
    nrt_inspect_config_free_activity_types(types, nt);
    CHECK(nrt_inspect_config_set_activity(ic, "host_memory", false) == NRT_SUCCESS, "disable host_memory");
    CHECK(nrt_inspect_config_set_activity(ic, "bogus", false) == NRT_INVALID, "unknown activity -> 2");
    CHECK(nrt_inspect_config_get_enabled_activity_types(ic, &types, &nt) == NRT_SUCCESS && nt == 3, "3 activities enabled");
    nrt_inspect_config_free_activity_types(types, nt);
    snprintf(path, sizeof path, "%s/inspect", dir);
    CHECK(nrt_inspect_config_set_output_dir(ic, path) == NRT_SUCCESS, "set output dir");
    CHECK(nrt_inspect_config_set_session_id(ic, 7) == NRT_SUCCESS, "session 7");
    CHECK(nrt_inspect_config_set_enable_inspect(ic, true) == NRT_SUCCESS, "enable inspect");
    CHECK(nrt_inspect_begin_with_options(ic) == NRT_SUCCESS, "nrt_inspect_begin_with_options");
    CHECK(nrt_inspect_begin_with_options(ic) == NRT_INVALID, "second begin -> 2");
    execute(3);
    CHECK(nrt_inspect_stop() == NRT_SUCCESS, "nrt_inspect_stop");
    snprintf(path, sizeof path, "%s/inspect/session_7/trace.json", dir);
    expect_trace(path, 3);
    CHECK(nrt_inspect_config_free(ic) == NRT_SUCCESS, "nrt_inspect_config_free");

    /* inspect from the environment (the Rust test sets NEURON_RT_INSPECT_*) */
    CHECK(nrt_inspect_begin() == NRT_SUCCESS, "nrt_inspect_begin");
    execute(1);
    CHECK(nrt_inspect_stop() == NRT_SUCCESS, "nrt_inspect_stop (environment)");
    snprintf(path, sizeof path, "%s/env/session_1/trace.json", dir);
    expect_trace(path, 1);

    /* continuous */
    nrt_profile_continuous_options_t *co = NULL;
    CHECK(nrt_profile_continuous_options_allocate(&co) == NRT_SUCCESS, "continuous options");
    snprintf(path, sizeof path, "%s/continuous", dir);
    CHECK(nrt_profile_continuous_options_set_output_dir(co, path) == NRT_SUCCESS, "continuous output dir");
    CHECK(nrt_profile_continuous_start(co) == NRT_SUCCESS, "nrt_profile_continuous_start");
    CHECK(nrt_profile_continuous_save(0, co) == NRT_INVALID, "save before any execution -> 2");
    execute(2);
    CHECK(nrt_profile_continuous_save(0, co) == NRT_SUCCESS, "nrt_profile_continuous_save");
    CHECK(nrt_profile_continuous_stop() == NRT_SUCCESS, "nrt_profile_continuous_stop");
    snprintf(path, sizeof path, "%s/continuous/continuous_vnc0_1.json", dir);
    expect_trace(path, 1);
    nrt_profile_continuous_options_free(co);

    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    for (uint64_t i = 0; i < n; i++) nrt_tensor_free(&ts[i]);
    nrt_free_model_tensor_info(info);
    nrt_unload(model);
    free(input);
    nrt_close();
    return finish();
}
